"""Images attached to the next message: the ``/image`` command and pasted file paths.

``ImageAttaching`` sits between ``ChatBase`` and ``ChatScreen``.  Attaching
reads the file and checks it at once (``imagefiles.read_image``: exists, size,
an image header the daemon would take), so a bad file is refused with a
notice when it is named, not when the message is sent.  The attachments wait
in the ``PendingImages`` line above the prompt until a message takes them; a
message taken back (failed request, Ctrl+E) puts its images back there.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

from textual import on

from localllm import config
from localllm.errors import InvalidRequest
from localllm.format import format_file_size
from localllm.imagefiles import read_image, to_path
from localllm.tui.format import attachment_text
from localllm.tui.screens.chat_base import ChatBase
from localllm.tui.sessions import Attachment
from localllm.tui.widgets.attachments import PendingImages
from localllm.tui.widgets.prompt import PromptInput

_COMMAND = re.compile(r"/image(?:\s+(.*))?", re.DOTALL)
_CLEAR = ("clear", "none", "drop", "-")


class ImageAttaching(ChatBase):
    @property
    def pending(self) -> PendingImages:
        return self.query_one(PendingImages)

    def image_command(self, text: str) -> bool:
        """Run ``/image``, ``/image PATH`` or ``/image clear``; False when ``text`` is a message."""
        match = _COMMAND.fullmatch(text.strip())
        if match is None:
            return False
        self.prompt.clear()
        arg = (match.group(1) or "").strip()
        if not arg:
            self._list_pending()
        elif arg.lower() in _CLEAR:
            dropped = self.pending.take()
            self.notify(f"Dropped {_count(len(dropped))}" if dropped else "No images attached")
        else:
            self.attach_paths([to_path(arg)])
        return True

    def _list_pending(self) -> None:
        images = self.pending.images
        if not images:
            self.notify("No images attached: /image PATH attaches one")
            return
        lines = "\n".join(attachment_text(a) for a in images)
        self.notify(lines, title=f"{_count(len(images))} for the next message")

    def attach_paths(self, paths: list[Path]) -> None:
        """Attach each file that passes the checks; a notice for each that does not."""
        for path in paths:
            pending = self.pending
            if len(pending.images) >= config.MAX_IMAGES:
                self.notify(f"A message takes at most {config.MAX_IMAGES} images",
                            title="Cannot attach image", severity="error")
                return
            try:
                data, _ = read_image(path, len(pending.images))
            except InvalidRequest as exc:
                self.notify(str(exc), title="Cannot attach image", severity="error",
                            timeout=8)
                continue
            if pending.total_bytes() + len(data) > config.MAX_IMAGES_BYTES:
                self.notify(f"{path.name} would make the message's images more than "
                            f"{format_file_size(config.MAX_IMAGES_BYTES)}",
                            title="Cannot attach image", severity="error", timeout=8)
                continue
            image = Attachment(path.name, len(data), base64.b64encode(data).decode("ascii"))
            pending.add(image)
            self.notify(f"{attachment_text(image)}  ({_count(len(pending.images))} for the "
                        "next message)", title="Image attached")

    @on(PromptInput.ImagesPasted)
    def on_images_pasted(self, event: PromptInput.ImagesPasted) -> None:
        self.attach_paths(event.paths)


def _count(n: int) -> str:
    return f"{n} image{'' if n == 1 else 's'}"
