"""The conversation: its messages, the prompt, the reply worker, edit and regenerate.

``Conversation`` holds the ``history`` of the chat on screen and what the
next request is made of (``chat``, ``model``, ``settings``); the chat screen
decides those (opening a chat, switching models, the settings dialog) and
hears back through the messages posted here.  A new chat is written to the
store only when its first message is sent, so opening the app does not leave
empty chats.

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
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message

from localllm.errors import LocalLLMError
from localllm.tui.mcptools import MAX_ROUNDS
from localllm.tui.reply import Reply
from localllm.tui.sessions import Chat, ChatSettings, Sessions, StoredMessage
from localllm.tui.widgets.attachments import PendingImages
from localllm.tui.widgets.message import MessageView
from localllm.tui.widgets.prompt import PromptInput
from localllm.tui.widgets.toolcall import ToolCallView

if TYPE_CHECKING:
    from localllm.api.bodies import ChatBody
    from localllm.api.client import AsyncClient
    from localllm.tui.mcptools import TuiTools

_TITLE_CHARS = 40


class Conversation(Vertical):
    """The log of messages, the images waiting for the next one, and the prompt."""

    class ReplyStarted(Message):
        """A reply began to stream."""

    class ReplyEnded(Message):
        """The reply's stream is closed; ``reply`` is the message kept in this chat.

        ``reply`` is None when nothing was kept here: the request failed and the
        user's message was taken back, or the reply was filed under a chat that
        is no longer on screen.
        """

        def __init__(self, reply: StoredMessage | None) -> None:
            super().__init__()
            self.reply = reply

    def __init__(self, client: AsyncClient, sessions: Sessions, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.client = client
        self.sessions = sessions
        self.chat: Chat | None = None
        self.model = ""
        self.settings = ChatSettings()
        self.history: list[StoredMessage] = []
        self.generating = False
        self.tools: TuiTools | None = None  # chat --mcp: the MCP tools offered (tui/mcptools.py)

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="log")
        yield PendingImages(id="pending")
        yield PromptInput(id="prompt")

    @property
    def log_view(self) -> VerticalScroll:
        return self.query_one("#log", VerticalScroll)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def pending(self) -> PendingImages:
        return self.query_one(PendingImages)

    def message_views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    def _entries(self) -> list[MessageView | ToolCallView]:
        """The log's entries, one per message of ``history``, tool results included."""
        return [w for w in self.log_view.children if isinstance(w, (MessageView, ToolCallView))]

    async def show_chat(self, chat: Chat | None, history: list[StoredMessage]) -> None:
        """Show ``chat`` (None: a new one, not saved yet); a reply on its way stops."""
        self.workers.cancel_group(self, "generate")
        self.chat = chat
        self.history = history
        await self.log_view.remove_children()
        await self.log_view.mount_all(_view(m, self.model) for m in self.history)
        self.log_view.scroll_end(animate=False)

    def ensure_chat(self, title_from: str = "") -> Chat:
        """The current chat, created in the store on first use."""
        if self.chat is None:
            title = " ".join(title_from.split())[:_TITLE_CHARS] or "New chat"
            self.chat = self.sessions.create(self.model, title, self.settings)
        return self.chat

    # -- sending ----------------------------------------------------------------------
    @on(PromptInput.Submitted)
    async def on_submit(self, event: PromptInput.Submitted) -> None:
        if self.pending.command(event.text):
            self.prompt.clear()
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
        user = self.sessions.add(chat.id, message)
        self.history.append(user)
        self.prompt.clear()
        await self.log_view.mount(MessageView(user, self.model))
        self.log_view.scroll_end(animate=False)
        self.generate()

    @on(PromptInput.ImagesPasted)
    def on_images_pasted(self, event: PromptInput.ImagesPasted) -> None:
        self.pending.attach(event.paths)

    def request(self) -> ChatBody:
        messages = [m.wire() for m in self.history]
        if self.settings.system:
            messages.insert(0, {"role": "system", "content": self.settings.system})
        payload: ChatBody = {"model": self.model, "messages": messages}
        if options := self.settings.options():
            payload["options"] = options
        if self.settings.keep_alive:
            payload["keep_alive"] = self.settings.keep_alive
        if self.tools is not None:
            payload["tools"] = self.tools.hub.native_tools()
        return payload

    @work(exclusive=True, group="generate")
    async def generate(self) -> None:
        """A reply; with MCP tools, the calls it makes and the replies after, until text."""
        for _ in range(MAX_ROUNDS + 1):
            kept = await self._reply()
            if kept is None or kept.partial or not kept.tool_calls or self.tools is None:
                return
            await self._call_tools(kept)

    async def _call_tools(self, reply: StoredMessage) -> None:
        """Each call of ``reply``, confirmed and made; its result kept as a tool message."""
        assert self.tools is not None
        chat = self.ensure_chat()
        for call in reply.tool_calls:
            outcome = await self.tools.run(self.app, call)
            message = self.sessions.add(chat.id, StoredMessage("tool", outcome.text))
            self.history.append(message)
            await self.log_view.mount(ToolCallView(message, outcome.title, outcome.arguments))
            self.follow()

    async def _reply(self) -> StoredMessage | None:
        chat = self.ensure_chat()
        self.generating = True
        self.post_message(self.ReplyStarted())
        reply = Reply()
        message = StoredMessage("assistant")
        view = MessageView(message, self.model)
        await self.log_view.mount(view)
        view.start_stream(reply)
        stream = self.client.chat(self.request())
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
        kept = await self._finish(chat, view, message, reply, error)
        self.post_message(self.ReplyEnded(kept))
        return kept

    async def _finish(
        self, chat: Chat, view: MessageView, message: StoredMessage, reply: Reply, error: str | None
    ) -> StoredMessage | None:
        got_text = bool(reply.content or reply.thinking or reply.tool_calls)
        if self.chat is not chat:
            # The user opened another chat meanwhile (which stopped this reply): file
            # what arrived under the chat it belongs to, and leave the screen alone.
            message.content, message.partial = reply.content, True
            message.stats = {**reply.stats(), "interrupted": "stopped"}
            if got_text:
                self.sessions.add(chat.id, message)
            return None
        if error is not None and error != "stopped" and not got_text:
            await self._take_back(view, error)
            return None
        message.content, message.thinking = reply.content, reply.thinking
        message.tool_calls, message.stats = reply.tool_calls, reply.stats()
        if error is not None:
            message.partial = True
            message.stats["interrupted"] = error if error == "stopped" else "interrupted"
            if error != "stopped":
                self.notify(f"Reply interrupted: {error}", severity="error", timeout=8)
        self.sessions.add(chat.id, message)
        self.history.append(message)
        await view.finish_stream()
        return message

    async def _take_back(self, view: MessageView, error: str) -> None:
        """The request failed before any text: drop the turn, give the prompt back."""
        await view.remove()
        last = self.history.pop() if self.history and self.history[-1].role == "user" else None
        if last is not None:
            self.sessions.truncate(self._chat_id(), last.id)
            views = self.message_views()
            if views:
                await views[-1].remove()
            if not self.prompt.text.strip():
                self.prompt.load_text(last.content)
                self.prompt.move_cursor(self.prompt.document.end)
            self.pending.put_back(last.images)
        self.notify(error, title="Request failed", severity="error", timeout=10)

    # -- actions on the conversation --------------------------------------------------
    def stop(self) -> None:
        if self.generating:
            self.workers.cancel_group(self, "generate")

    async def edit_last(self) -> None:
        """Take back the last user message and what followed it, into the prompt."""
        if self.generating:
            return
        index = next(
            (i for i in range(len(self.history) - 1, -1, -1) if self.history[i].role == "user"),
            None,
        )
        if index is None:
            self.notify("Nothing to edit yet")
            return
        dropped = await self._drop_from(index)
        self.prompt.load_text(dropped[0].content)
        self.pending.put_back(dropped[0].images)
        self.prompt.move_cursor(self.prompt.document.end)
        self.prompt.focus()

    async def regenerate(self) -> None:
        if self.generating or not self.history or self.history[-1].role != "assistant":
            self.notify("No reply to regenerate")
            return
        await self._drop_from(len(self.history) - 1)
        self.generate()

    async def _drop_from(self, index: int) -> list[StoredMessage]:
        """Forget ``history[index:]`` in the store and on screen; returns what went."""
        dropped = self.history[index:]
        self.sessions.truncate(self._chat_id(), self.history[index].id)
        del self.history[index:]
        for view in self._entries()[index:]:
            await view.remove()
        return dropped

    def _chat_id(self) -> int:
        return self.chat.id if self.chat is not None else 0

    def copy_last(self) -> None:
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


def _view(message: StoredMessage, model: str) -> MessageView | ToolCallView:
    if message.role == "tool":  # a tool's result, kept: folded, as when it came
        return ToolCallView(message, "Tool result")
    return MessageView(message, model)


async def _close(stream: AsyncIterator[object]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
