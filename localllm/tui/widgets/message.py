"""A chat message: role line, attached images, folded thinking, Markdown body, tool calls,
reply stats.

While a reply streams, the view redraws from its ``Reply`` on a timer
(``REFRESH_HZ``) instead of on every token: at 200 tokens/s re-parsing the
Markdown per token would drop frames, while 25 redraws a second look smooth.
Only the text added since the last redraw is appended to the Markdown widget.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Collapsible, Label, Markdown, Static

from localllm.tui.format import attachment_text, stats_text, tool_call_text
from localllm.tui.reply import Reply
from localllm.tui.sessions import StoredMessage

REFRESH_HZ = 25

_ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}


class MessageView(Vertical, can_focus=True):
    """One message of the conversation; focus it and press ``c`` to copy it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("c", "copy", "Copy message")]

    class CopyRequested(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, message: StoredMessage, model: str = "") -> None:
        super().__init__(classes=f"message {message.role}")
        self.message = message
        self.model = model
        self.reply: Reply | None = None
        self._timer: Timer | None = None
        self._shown_content = 0
        self._shown_thinking = 0
        self._shown_calls = 0
        self.redraws = 0  # counted so tests can check the batching

    def compose(self) -> ComposeResult:
        yield Label(self._title(), classes="role", markup=False)
        yield Static(
            "\n".join(attachment_text(a) for a in self.message.images),
            classes="attachments",
            markup=False,
        )
        with Collapsible(title="Thinking", collapsed=True, classes="thinking"):
            yield Static(self.message.thinking, classes="thinking-text", markup=False)
        yield Markdown(self.message.content, classes="body")
        yield Static(self._calls_text(), classes="tool-calls", markup=False)
        yield Label(self._footer(), classes="stats", markup=False)

    def on_mount(self) -> None:
        self._sync_visibility()

    @property
    def text(self) -> str:
        return self.reply.content if self.reply is not None else self.message.content

    # -- streaming ----------------------------------------------------------------
    def start_stream(self, reply: Reply) -> None:
        self.reply = reply
        self.add_class("streaming")
        self._timer = self.set_interval(1 / REFRESH_HZ, self._redraw)

    async def finish_stream(self) -> None:
        """Stop the timer and draw what is left; the caller has updated ``message``."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        await self._redraw()
        self.reply = None
        self.remove_class("streaming")
        self.query_one(".role", Label).update(self._title())
        self.query_one(".stats", Label).update(self._footer())
        self._sync_visibility()

    async def _redraw(self) -> None:
        reply = self.reply
        if reply is None:
            return
        changed = False
        if len(reply.thinking) > self._shown_thinking:
            self.query_one(".thinking-text", Static).update(reply.thinking)
            self._shown_thinking = len(reply.thinking)
            changed = True
        if len(reply.content) > self._shown_content:
            delta = reply.content[self._shown_content :]
            self._shown_content = len(reply.content)
            await self.query_one(".body", Markdown).append(delta)
            changed = True
        if len(reply.tool_calls) > self._shown_calls:
            self._shown_calls = len(reply.tool_calls)
            self.query_one(".tool-calls", Static).update(self._calls_text(reply))
            changed = True
        if changed:
            self.redraws += 1
            self._sync_visibility()
            self.post_message(self.Grew())

    class Grew(Message):
        """Posted after a redraw, so the log can follow the bottom."""

    # -- display ------------------------------------------------------------------
    def _title(self) -> str:
        title = _ROLE_TITLES.get(self.message.role, self.message.role)
        if self.message.role == "assistant" and self.model:
            title += f" · {self.model}"
        if self.message.partial:
            reason = self.message.stats.get("interrupted", "interrupted")
            title += f"  [{reason}]"
        return title

    def _footer(self) -> str:
        return stats_text(self.message.stats) if self.message.role == "assistant" else ""

    def _calls_text(self, reply: Reply | None = None) -> str:
        calls = reply.tool_calls if reply is not None else self.message.tool_calls
        return "\n".join(f"⚙ {tool_call_text(c)}" for c in calls)

    def _sync_visibility(self) -> None:
        thinking = self.reply.thinking if self.reply is not None else self.message.thinking
        calls = self.reply.tool_calls if self.reply is not None else self.message.tool_calls
        self.query_one(".attachments", Static).display = bool(self.message.images)
        self.query_one(".thinking", Collapsible).display = bool(thinking)
        self.query_one(".tool-calls", Static).display = bool(calls)
        self.query_one(".stats", Label).display = bool(self._footer())
        self.set_class(self.message.partial, "partial")

    def action_copy(self) -> None:
        self.post_message(self.CopyRequested(self.text))
