"""Images attached to the next message: the ``/image`` command, pasted paths, and the line
above the prompt that lists them.

Attaching reads the file and checks it at once (``images.files.read_image``:
exists, size, an image header the daemon would take), so a bad file is
refused with a notice when it is named, not when the message is sent.  The
attachments wait here until a message takes them; a message taken back
(failed request, Ctrl+E) puts its images back.  The line hides while there
are none, so the layout is unchanged for text-only chats.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from pathlib import Path

from textual.widgets import Static

from localllm import config
from localllm.errors import InvalidRequest
from localllm.format import format_file_size
from localllm.images.files import read_image, to_path
from localllm.tui.format import attachment_text
from localllm.tui.sessions import Attachment

_COMMAND = re.compile(r"/image(?:\s+(.*))?", re.DOTALL)
_CLEAR = ("clear", "none", "drop", "-")


class PendingImages(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self.images: list[Attachment] = []

    def on_mount(self) -> None:
        self._show()

    # -- attaching --------------------------------------------------------------------
    def command(self, text: str) -> bool:
        """Run ``/image``, ``/image PATH`` or ``/image clear``; False when ``text`` is a message."""
        match = _COMMAND.fullmatch(text.strip())
        if match is None:
            return False
        arg = (match.group(1) or "").strip()
        if not arg:
            self._list()
        elif arg.lower() in _CLEAR:
            dropped = self.take()
            self.notify(f"Dropped {_count(len(dropped))}" if dropped else "No images attached")
        else:
            self.attach([to_path(arg)])
        return True

    def _list(self) -> None:
        if not self.images:
            self.notify("No images attached: /image PATH attaches one")
            return
        lines = "\n".join(attachment_text(a) for a in self.images)
        self.notify(lines, title=f"{_count(len(self.images))} for the next message")

    def attach(self, paths: list[Path]) -> None:
        """Attach each file that passes the checks; a notice for each that does not."""
        for path in paths:
            if len(self.images) >= config.MAX_IMAGES:
                self.notify(
                    f"A message takes at most {config.MAX_IMAGES} images",
                    title="Cannot attach image",
                    severity="error",
                )
                return
            try:
                data, _ = read_image(path, len(self.images))
            except InvalidRequest as exc:
                self.notify(str(exc), title="Cannot attach image", severity="error", timeout=8)
                continue
            if self.total_bytes() + len(data) > config.MAX_IMAGES_BYTES:
                self.notify(
                    f"{path.name} would make the message's images more than "
                    f"{format_file_size(config.MAX_IMAGES_BYTES)}",
                    title="Cannot attach image",
                    severity="error",
                    timeout=8,
                )
                continue
            image = Attachment(path.name, len(data), base64.b64encode(data).decode("ascii"))
            self.add(image)
            self.notify(
                f"{attachment_text(image)}  ({_count(len(self.images))} for the next message)",
                title="Image attached",
            )

    # -- the list ---------------------------------------------------------------------
    def add(self, image: Attachment) -> None:
        self.images.append(image)
        self._show()

    def put_back(self, images: Iterable[Attachment]) -> None:
        """Images of a message taken back go first: they were attached before."""
        self.images[:0] = list(images)
        self._show()

    def take(self) -> list[Attachment]:
        """Empty the list and return what it held (the message being sent takes them)."""
        images, self.images = self.images, []
        self._show()
        return images

    def total_bytes(self) -> int:
        return sum(a.size for a in self.images)

    def _show(self) -> None:
        self.update(
            "   ".join(attachment_text(a) for a in self.images)
            + ("   (/image clear drops them)" if self.images else "")
        )
        self.display = bool(self.images)


def _count(n: int) -> str:
    return f"{n} image{'' if n == 1 else 's'}"
