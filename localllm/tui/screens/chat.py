"""The chat screen: sidebar of chats, the conversation, the prompt and the status line.

This module owns the conversation and its streaming; managing chats (open,
rename, delete, export, settings, model choice) lives in ``chat_base.py``,
attaching images (``/image``, pasted paths) in ``chat_images.py``.

A reply streams in an async worker (``group="generate"``, exclusive).  Escape
cancels it; the stream is closed explicitly so the daemon stops generating at
once.  What happens to a reply that does not finish:

* stopped by the user, or the connection dropped after some text arrived:
  the partial reply is kept, saved and marked;
* nothing arrived (the model failed to load, the daemon is gone, a text-only
  model refused the images): the user's message is taken back and put into
  the prompt again, its images attached again, with an error notice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer

from localllm.errors import LocalLLMError
from localllm.tui.reply import Reply
from localllm.tui.screens.chat_images import ImageAttaching
from localllm.tui.sessions import Chat, StoredMessage
from localllm.tui.widgets.attachments import PendingImages
from localllm.tui.widgets.message import MessageView
from localllm.tui.widgets.prompt import PromptInput
from localllm.tui.widgets.sidebar import ChatList
from localllm.tui.widgets.status import StatusLine


class ChatScreen(ImageAttaching):
    # Below 100 columns the chat list hides (Ctrl+B shows it) so 80x24 stays readable.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]  # noqa: RUF012
    # Priority: the prompt (a TextArea) would otherwise take Ctrl+E (end of line) and
    # Ctrl+Y (redo); the app's keys must work whatever has focus.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop", "Stop", show=False),
        Binding("ctrl+n", "new_chat", "New", priority=True),
        Binding("ctrl+o", "models", "Models", priority=True),
        Binding("ctrl+s", "settings", "Settings", priority=True),
        Binding("ctrl+e", "edit_last", "Edit last", priority=True, show=False),
        Binding("ctrl+r", "regenerate", "Regenerate", priority=True, show=False),
        Binding("ctrl+y", "copy_last", "Copy reply", priority=True, show=False),
        Binding("ctrl+b", "toggle_sidebar", "Chats", priority=True),
        Binding("f2", "rename", "Rename", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield ChatList(id="sidebar")
            with Vertical(id="chat-pane"):
                yield VerticalScroll(id="log")
                yield PendingImages(id="pending")
                yield PromptInput(id="prompt")
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sidebar", ChatList).border_title = "Chats"
        self.refresh_sidebar()
        self.prompt.focus()
        self.show_status()

    # -- sending ----------------------------------------------------------------------
    @on(PromptInput.Submitted)
    async def on_submit(self, event: PromptInput.Submitted) -> None:
        if self.image_command(event.text):
            return
        # Images alone make a message; an empty prompt without any does nothing.
        text = event.text if event.text.strip() else ""
        if not text and not self.pending.images:
            return
        if self.generating:
            self.notify("A reply is still being generated (Escape stops it)", severity="warning")
            return
        if not self.model:
            self.notify("No model chosen: press Ctrl+O to pick or pull one", severity="error")
            return
        chat = self.ensure_chat(title_from=text or self.pending.images[0].name)
        message = StoredMessage("user", text, images=self.pending.take())
        user = self.llm.sessions.add(chat.id, message)
        self.history.append(user)
        self.prompt.clear()
        await self.log_view.mount(MessageView(user, self.model))
        self.log_view.scroll_end(animate=False)
        self.generate()

    def request(self) -> dict[str, Any]:
        messages = [m.wire() for m in self.history]
        if self.settings.system:
            messages.insert(0, {"role": "system", "content": self.settings.system})
        payload: dict[str, Any] = {"model": self.model, "messages": messages}
        if options := self.settings.options():
            payload["options"] = options
        if self.settings.keep_alive:
            payload["keep_alive"] = self.settings.keep_alive
        return payload

    @work(exclusive=True, group="generate")
    async def generate(self) -> None:
        chat = self.ensure_chat()
        self.generating = True
        self.status.status.note = "generating…"
        self.status.show()
        reply = Reply()
        message = StoredMessage("assistant")
        view = MessageView(message, self.model)
        await self.log_view.mount(view)
        view.start_stream(reply)
        stream = self.llm.client.chat(self.request())
        error: str | None = None
        try:
            async for chunk in stream:
                reply.feed(chunk)
        except asyncio.CancelledError:
            error = "stopped"
        except LocalLLMError as exc:  # a lost connection too, mid-stream or not
            error = str(exc)
        finally:
            await _close(stream)
            self.generating = False
            self.status.status.note = ""
        await self._finish(chat, view, message, reply, error)

    async def _finish(self, chat: Chat, view: MessageView, message: StoredMessage,
                      reply: Reply, error: str | None) -> None:
        got_text = bool(reply.content or reply.thinking or reply.tool_calls)
        if self.chat is not chat:
            # The user opened another chat meanwhile (which stopped this reply): file
            # what arrived under the chat it belongs to, and leave the screen alone.
            message.content, message.partial = reply.content, True
            message.stats = {**reply.stats(), "interrupted": "stopped"}
            if got_text:
                self.llm.sessions.add(chat.id, message)
            return
        if error is not None and error != "stopped" and not got_text:
            await self._take_back(view, error)
            return
        message.content, message.thinking = reply.content, reply.thinking
        message.tool_calls, message.stats = reply.tool_calls, reply.stats()
        if error is not None:
            message.partial = True
            message.stats["interrupted"] = error if error == "stopped" else "interrupted"
            if error != "stopped":
                self.notify(f"Reply interrupted: {error}", severity="error", timeout=8)
        self.llm.sessions.add(chat.id, message)
        self.history.append(message)
        await view.finish_stream()
        self._show_reply_stats(message.stats)
        self.refresh_sidebar()
        self.refresh_placement()

    async def _take_back(self, view: MessageView, error: str) -> None:
        """The request failed before any text: drop the turn, give the prompt back."""
        await view.remove()
        last = self.history.pop() if self.history and self.history[-1].role == "user" else None
        if last is not None:
            self.llm.sessions.truncate(last_chat_id(self), last.id)
            views = self.message_views()
            if views:
                await views[-1].remove()
            if not self.prompt.text.strip():
                self.prompt.load_text(last.content)
                self.prompt.move_cursor(self.prompt.document.end)
            self.pending.put_back(last.images)
        self.notify(error, title="Request failed", severity="error", timeout=10)
        self.show_status()

    # -- actions on the conversation --------------------------------------------------
    def action_stop(self) -> None:
        if self.generating:
            self.workers.cancel_group(self, "generate")

    async def action_edit_last(self) -> None:
        if self.generating:
            return
        index = next((i for i in range(len(self.history) - 1, -1, -1)
                      if self.history[i].role == "user"), None)
        if index is None:
            self.notify("Nothing to edit yet")
            return
        dropped = await self._drop_from(index)
        self.prompt.load_text(dropped[0].content)
        self.pending.put_back(dropped[0].images)
        self.prompt.move_cursor(self.prompt.document.end)
        self.prompt.focus()

    async def action_regenerate(self) -> None:
        if self.generating or not self.history or self.history[-1].role != "assistant":
            self.notify("No reply to regenerate")
            return
        await self._drop_from(len(self.history) - 1)
        self.generate()

    async def _drop_from(self, index: int) -> list[StoredMessage]:
        """Forget ``history[index:]`` in the store and on screen; returns what went."""
        dropped = self.history[index:]
        self.llm.sessions.truncate(last_chat_id(self), self.history[index].id)
        del self.history[index:]
        for view in self.message_views()[index:]:
            await view.remove()
        return dropped

    def action_copy_last(self) -> None:
        reply = next((m for m in reversed(self.history) if m.role == "assistant"), None)
        if reply is None:
            self.notify("No reply to copy yet")
            return
        self._copy(reply.content)

    @on(MessageView.CopyRequested)
    def on_copy_requested(self, event: MessageView.CopyRequested) -> None:
        self._copy(event.text)

    def _copy(self, text: str) -> None:
        self.app.copy_to_clipboard(text)
        self.notify(f"Copied {len(text)} characters")

    @on(MessageView.Grew)
    def follow(self) -> None:
        # Follow the reply only while the user is at (or near) the bottom; someone
        # scrolled up to read must not be dragged down by every redraw.
        log = self.log_view
        if log.max_scroll_y - log.scroll_y <= 3:
            log.scroll_end(animate=False)


def last_chat_id(screen: ChatScreen) -> int:
    return screen.chat.id if screen.chat is not None else 0


async def _close(stream: AsyncIterator[dict[str, Any]]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
