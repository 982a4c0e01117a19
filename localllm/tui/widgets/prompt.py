"""The multi-line prompt: Enter sends, Shift+Enter or Ctrl+J starts a new line.

Many terminals send the same bytes for Enter and Shift+Enter; Ctrl+J always
arrives as its own key, so it is the newline that works everywhere.
"""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import TextArea

_NEWLINE_KEYS = ("shift+enter", "ctrl+j")


class PromptInput(TextArea):
    """A ``TextArea`` that posts ``Submitted`` on Enter instead of inserting a newline."""

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, compact=True,
                         tab_behavior="focus", highlight_cursor_line=False,
                         placeholder="Message  (Enter send · Ctrl+J newline · F1 help)")

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            if self.text.strip():
                self.post_message(self.Submitted(self.text))
            return
        if event.key in _NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)
