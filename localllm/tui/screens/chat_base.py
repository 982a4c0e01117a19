"""The chat screen's base: its state, widgets, status line, and managing chats.

``ChatBase`` holds the current ``chat``, ``model``, ``settings`` and
``history`` and the actions on whole chats (new, open, rename, delete,
export, settings, model choice); ``ChatScreen`` adds the conversation and its
streaming.  A new chat is written to the store only when its first message is
sent, so opening the app does not leave empty chats.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import OptionList

from localllm.errors import LocalLLMError
from localllm.tui.format import export_json, export_markdown
from localllm.tui.screens.dialogs import AskScreen, ConfirmScreen
from localllm.tui.screens.models import ModelsScreen
from localllm.tui.screens.settings import SettingsScreen
from localllm.tui.sessions import Chat, ChatSettings, StoredMessage
from localllm.tui.widgets.message import MessageView
from localllm.tui.widgets.prompt import PromptInput
from localllm.tui.widgets.sidebar import ChatList
from localllm.tui.widgets.status import StatusLine

if TYPE_CHECKING:
    from localllm.tui.app import LocalLLMApp

_TITLE_CHARS = 40


class ChatBase(Screen[None]):
    def __init__(self) -> None:
        super().__init__()
        self.chat: Chat | None = None
        self.model = ""
        self.settings = ChatSettings()
        self.history: list[StoredMessage] = []
        self.generating = False

    @property
    def llm(self) -> LocalLLMApp:
        return self.app  # type: ignore[return-value]

    # -- widgets and the status line ----------------------------------------------------
    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def log_view(self) -> VerticalScroll:
        return self.query_one("#log", VerticalScroll)

    @property
    def status(self) -> StatusLine:
        return self.query_one(StatusLine)

    def show_status(self) -> None:
        self.status.status.model = self.model
        self.status.show()

    def message_views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    async def show_messages(self) -> None:
        """Rebuild the conversation view from ``history``."""
        await self.log_view.remove_children()
        await self.log_view.mount_all(MessageView(m, self.model) for m in self.history)
        self.log_view.scroll_end(animate=False)

    def _show_reply_stats(self, stats: dict[str, Any]) -> None:
        status = self.status.status
        status.ttft, status.tok_s = stats.get("ttft"), stats.get("tok_s")
        if "tokens" in stats:
            status.ctx_used = stats.get("prompt_tokens", 0) + stats["tokens"]
        self.show_status()

    @work(exclusive=True, group="placement")
    async def refresh_placement(self) -> None:
        """Where the model runs and its context, from ``ps``."""
        status = self.status.status
        try:
            running = await self.llm.client.ps()
        except LocalLLMError:
            return
        if not self.is_attached or not self.query(StatusLine):
            return  # the app closed while ps was on its way: nothing left to update
        entry = next((m for m in running if m.get("name") == self.model), None)
        status.loaded = entry is not None
        if entry is not None:
            status.size, status.size_vram = entry.get("size", 0), entry.get("size_vram", 0)
            status.num_ctx = self.settings.num_ctx or entry.get("context_length")
        else:
            status.num_ctx = self.settings.num_ctx
        self.show_status()

    # -- chats ------------------------------------------------------------------------

    def ensure_chat(self, title_from: str = "") -> Chat:
        """The current chat, created in the store on first use."""
        if self.chat is None:
            title = " ".join(title_from.split())[:_TITLE_CHARS] or "New chat"
            self.chat = self.llm.sessions.create(self.model, title, self.settings)
        return self.chat

    def refresh_sidebar(self) -> None:
        self.query_one("#sidebar", ChatList).show(
            self.llm.sessions.chats(), self.chat.id if self.chat else None)

    async def open_chat(self, chat_id: int) -> None:
        self.workers.cancel_group(self, "generate")
        self.chat = self.llm.sessions.get(chat_id)
        self.model = self.chat.model or self.model
        self.settings = self.chat.settings
        self.history = self.llm.sessions.messages(chat_id)
        await self.show_messages()
        last = next((m for m in reversed(self.history) if m.role == "assistant"), None)
        status = self.status.status
        status.ttft = status.tok_s = status.ctx_used = None
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
        self.workers.cancel_group(self, "generate")
        self.chat = None
        self.settings = ChatSettings()
        self.history = []
        await self.show_messages()
        status = self.status.status
        status.ttft = status.tok_s = status.ctx_used = None
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
            self.llm.sessions.rename(self.chat.id, title)
            self.chat.title = title
            self.refresh_sidebar()

    @work(group="dialog")
    async def action_delete_chat(self) -> None:
        if self.chat is None:
            return
        if await self.app.push_screen_wait(ConfirmScreen(f"Delete chat “{self.chat.title}”?")):
            self.llm.sessions.delete(self.chat.id)
            await self.action_new_chat()

    def action_export(self, kind: str) -> Path | None:
        if self.chat is None:
            self.notify("Nothing to export yet")
            return None
        render = export_json if kind == "json" else export_markdown
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.chat.title).strip("-").lower() or "chat"
        path = self.llm.export_dir / f"chat-{self.chat.id}-{slug}.{kind}"
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
            self.llm.sessions.save_settings(self.chat.id, settings)
            self.chat.settings = settings
        self.status.status.num_ctx = settings.num_ctx or self.status.status.num_ctx
        self.show_status()
        self.notify("Settings saved with this chat")

    @work(group="dialog")
    async def action_models(self) -> None:
        model = await self.app.push_screen_wait(ModelsScreen(self.model))
        if model:
            self.use_model(model)
        self.prompt.focus()

    def use_model(self, model: str) -> None:
        self.model = model
        if self.chat is not None:
            self.llm.sessions.set_model(self.chat.id, model)
        status = self.status.status
        status.ttft = status.tok_s = status.ctx_used = None
        self.show_status()
        self.refresh_placement()
