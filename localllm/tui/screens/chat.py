"""The chat screen: the list of chats, the conversation, the status line; managing chats.

The screen decides which chat is shown, with which model and settings:
opening, starting, renaming, deleting and exporting chats, the settings
dialog and the model picker.  The conversation itself (its messages, the
prompt, the reply worker, edit and regenerate) is the ``Conversation``
widget (``widgets/conversation.py``), which posts ``ReplyStarted`` and
``ReplyEnded`` for the status line and the chat list; images waiting for the
next message are the ``PendingImages`` widget's (``widgets/attachments.py``).
The keys are bound here, so they work whatever has focus.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, OptionList

from localllm.errors import LocalLLMError
from localllm.tui.format import export_json, export_markdown
from localllm.tui.screens.dialogs import AskScreen, ConfirmScreen
from localllm.tui.screens.models import ModelsScreen
from localllm.tui.screens.settings import SettingsScreen
from localllm.tui.sessions import Chat, ChatSettings, ReplyStats, Sessions, StoredMessage
from localllm.tui.widgets.attachments import PendingImages
from localllm.tui.widgets.conversation import Conversation
from localllm.tui.widgets.message import MessageView
from localllm.tui.widgets.prompt import PromptInput
from localllm.tui.widgets.sidebar import ChatList
from localllm.tui.widgets.status import StatusLine

if TYPE_CHECKING:
    from localllm.api.bodies import ChatBody
    from localllm.api.client import AsyncClient


class ChatScreen(Screen[None]):
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

    class SettingsApplied(Message):
        """The shown chat's settings changed (opened, new, saved): the app offers the
        MCP tools they name, unless ``--mcp`` chose them."""

        def __init__(self, settings: ChatSettings) -> None:
            super().__init__()
            self.settings = settings

    def __init__(self, client: AsyncClient, sessions: Sessions, export_dir: Path) -> None:
        super().__init__()
        self.client = client
        self.sessions = sessions
        self.export_dir = export_dir
        # Made here, not in compose: the app may choose the model before it is mounted.
        self.conversation = Conversation(client, sessions, id="chat-pane")

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield ChatList(id="sidebar")
            yield self.conversation
        yield StatusLine(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sidebar", ChatList).border_title = "Chats"
        self.refresh_sidebar()
        self.prompt.focus()
        self.show_status()

    # -- the conversation and what it is made of ----------------------------------------
    @property
    def chat(self) -> Chat | None:
        return self.conversation.chat

    @property
    def model(self) -> str:
        return self.conversation.model

    @property
    def settings(self) -> ChatSettings:
        return self.conversation.settings

    @settings.setter
    def settings(self, settings: ChatSettings) -> None:
        self.conversation.settings = settings
        self.post_message(self.SettingsApplied(settings))

    @property
    def history(self) -> list[StoredMessage]:
        return self.conversation.history

    @property
    def generating(self) -> bool:
        return self.conversation.generating

    @property
    def prompt(self) -> PromptInput:
        return self.conversation.prompt

    @property
    def pending(self) -> PendingImages:
        return self.conversation.pending

    def message_views(self) -> list[MessageView]:
        return self.conversation.message_views()

    def request(self) -> ChatBody:
        return self.conversation.request()

    # -- the status line ------------------------------------------------------------------
    @property
    def status(self) -> StatusLine:
        return self.query_one(StatusLine)

    def show_status(self) -> None:
        self.status.status.model = self.model
        self.status.show()

    def _show_reply_stats(self, stats: ReplyStats) -> None:
        status = self.status.status
        status.ttft, status.tok_s = stats.get("ttft"), stats.get("tok_s")
        if "tokens" in stats:
            status.ctx_used = stats.get("prompt_tokens", 0) + stats["tokens"]
        self.show_status()

    def _clear_reply_stats(self) -> None:
        status = self.status.status
        status.ttft = status.tok_s = status.ctx_used = None

    @on(Conversation.ReplyStarted)
    def on_reply_started(self) -> None:
        self.status.status.note = "generating…"
        self.status.show()

    @on(Conversation.ReplyEnded)
    def on_reply_ended(self, event: Conversation.ReplyEnded) -> None:
        self.status.status.note = ""
        if event.reply is None:
            self.show_status()
            return
        self._show_reply_stats(event.reply.stats)
        self.refresh_sidebar()  # the chat was used last: it goes to the top
        self.refresh_placement()

    @work(exclusive=True, group="placement")
    async def refresh_placement(self) -> None:
        """Where the model runs and its context, from ``ps``."""
        status = self.status.status
        try:
            running = await self.client.ps()
        except LocalLLMError:
            return
        if not self.is_attached or not self.query(StatusLine):
            return  # the app closed while ps was on its way: nothing left to update
        entry = next((m for m in running if m.get("name") == self.model), None)
        status.loaded = entry is not None
        if running:
            self.status.ask_hint(self.client)
        if entry is not None:
            status.size, status.size_vram = entry.get("size", 0), entry.get("size_vram", 0)
            status.num_ctx = self.settings.num_ctx or entry.get("context_length")
        else:
            status.num_ctx = self.settings.num_ctx
        self.show_status()

    # -- chats ------------------------------------------------------------------------
    def refresh_sidebar(self) -> None:
        self.query_one("#sidebar", ChatList).show(
            self.sessions.chats(), self.chat.id if self.chat else None
        )

    async def open_chat(self, chat_id: int) -> None:
        chat = self.sessions.get(chat_id)
        conversation = self.conversation
        conversation.model = chat.model or conversation.model
        self.settings = chat.settings
        await conversation.show_chat(chat, self.sessions.messages(chat_id))
        last = next((m for m in reversed(self.history) if m.role == "assistant"), None)
        self._clear_reply_stats()
        if last is not None:
            self._show_reply_stats(last.stats)
        self.refresh_sidebar()
        self.refresh_placement()

    @on(OptionList.OptionSelected, "#sidebar")
    async def on_chat_picked(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            await self.open_chat(int(event.option.id))
            self.prompt.focus()

    async def action_new_chat(self) -> None:
        self.settings = ChatSettings()
        await self.conversation.show_chat(None, [])
        self._clear_reply_stats()
        self.refresh_sidebar()
        self.prompt.focus()
        self.show_status()

    def action_toggle_sidebar(self) -> None:
        # On a narrow screen the list is hidden unless asked for, on a wide one shown
        # unless hidden: one class per intent keeps both sizes right.
        narrow = self.has_class("-narrow")
        self.toggle_class("-show-sidebar" if narrow else "-hide-sidebar")

    @work(group="dialog")
    async def action_rename(self) -> None:
        if self.chat is None:
            self.notify("Send a message first: this chat is not saved yet")
            return
        title = await self.app.push_screen_wait(AskScreen("Rename chat", self.chat.title))
        if title:
            self.sessions.rename(self.chat.id, title)
            self.chat.title = title
            self.refresh_sidebar()

    @work(group="dialog")
    async def action_delete_chat(self) -> None:
        if self.chat is None:
            return
        if await self.app.push_screen_wait(ConfirmScreen(f"Delete chat “{self.chat.title}”?")):
            self.sessions.delete(self.chat.id)
            await self.action_new_chat()

    def action_export(self, kind: str) -> Path | None:
        if self.chat is None:
            self.notify("Nothing to export yet")
            return None
        render = export_json if kind == "json" else export_markdown
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.chat.title).strip("-").lower() or "chat"
        path = self.export_dir / f"chat-{self.chat.id}-{slug}.{kind}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(self.chat, self.history), encoding="utf-8")
        self.notify(f"Exported to {path}")
        return path

    @work(group="dialog")
    async def action_settings(self) -> None:
        settings = await self.app.push_screen_wait(SettingsScreen(self.settings))
        if settings is None:
            return
        self.settings = settings
        if self.chat is not None:
            self.sessions.save_settings(self.chat.id, settings)
            self.chat.settings = settings
        self.status.status.num_ctx = settings.num_ctx or self.status.status.num_ctx
        self.show_status()
        self.notify("Settings saved with this chat")

    @work(group="dialog")
    async def action_models(self) -> None:
        model = await self.app.push_screen_wait(ModelsScreen(self.client, self.model))
        if model:
            self.use_model(model)
        self.prompt.focus()

    def use_model(self, model: str) -> None:
        self.conversation.model = model
        if self.chat is not None:
            self.sessions.set_model(self.chat.id, model)
        self._clear_reply_stats()
        self.show_status()
        self.refresh_placement()

    # -- keys for the conversation ----------------------------------------------------
    def action_stop(self) -> None:
        self.conversation.stop()

    async def action_edit_last(self) -> None:
        await self.conversation.edit_last()

    async def action_regenerate(self) -> None:
        await self.conversation.regenerate()

    def action_copy_last(self) -> None:
        self.conversation.copy_last()
