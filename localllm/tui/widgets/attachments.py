"""The line above the prompt listing the images attached to the next message.

It holds the pending attachments themselves (the screen adds, clears and
takes them) and hides while there are none, so the layout is unchanged for
text-only chats.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import Static

from localllm.tui.format import attachment_text
from localllm.tui.sessions import Attachment


class PendingImages(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self.images: list[Attachment] = []

    def on_mount(self) -> None:
        self._show()

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
        self.update("   ".join(attachment_text(a) for a in self.images)
                    + ("   (/image clear drops them)" if self.images else ""))
        self.display = bool(self.images)
