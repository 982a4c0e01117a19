"""One MCP tool call in the conversation: what was called, and what it gave, folded.

Shown after the reply that made the call (``chat --mcp``); a ``Collapsible``
whose title says the tool and how the call went, and whose body holds the
arguments and the result, so a long result does not push the chat away.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible, Static

from localllm.tui.sessions import StoredMessage


class ToolCallView(Vertical):
    """A tool message: its title line, and the call's arguments and result when unfolded."""

    DEFAULT_CSS = """
    ToolCallView { height: auto; margin: 0 1; }
    ToolCallView .tool-args { color: $text-muted; }
    """

    def __init__(self, message: StoredMessage, title: str, arguments: str = "") -> None:
        super().__init__(classes="tool-call")
        self.message = message
        self.title = title
        self.arguments = arguments

    def compose(self) -> ComposeResult:
        with Collapsible(title=self.title, collapsed=True):
            if self.arguments:
                yield Static(self.arguments, classes="tool-args", markup=False)
            yield Static(self.message.content, classes="tool-result", markup=False)
