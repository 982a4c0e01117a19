"""The multi-line prompt: Enter sends, Shift+Enter or Ctrl+J starts a new line.

Many terminals send the same bytes for Enter and Shift+Enter; Ctrl+J always
arrives as its own key, so it is the newline that works everywhere.

Enter posts ``Submitted`` even for an empty prompt: a message may be images
alone, and only the screen knows whether some are attached.  A paste that is
nothing but the paths of image files (a file dropped on the terminal) posts
``ImagesPasted`` instead of inserting the text.
"""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from localllm.images.files import pasted_images

_NEWLINE_KEYS = ("shift+enter", "ctrl+j")


class PromptInput(TextArea):
    """A ``TextArea`` that posts ``Submitted`` on Enter instead of inserting a newline."""

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class ImagesPasted(Message):
        def __init__(self, paths: list[Path]) -> None:
            super().__init__()
            self.paths = paths

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            compact=True,
            tab_behavior="focus",
            highlight_cursor_line=False,
            placeholder="Message  (Enter send · Ctrl+J newline · F1 help)",
        )

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        if event.key in _NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)

    async def _on_paste(self, event: events.Paste) -> None:
        # No call to super(): Textual dispatches to every class of the MRO, so
        # TextArea inserts the text itself unless prevent_default() stops it.
        if not self.read_only and (paths := pasted_images(event.text)):
            event.stop()
            event.prevent_default()
            self.post_message(self.ImagesPasted(paths))
