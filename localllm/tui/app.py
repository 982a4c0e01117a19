"""The Textual app of ``localllm chat``: a switchboard of bindings and palette commands.

It owns the HTTP client (``api.client.AsyncClient``), the chat store and the
start-up check: when nothing answers at the daemon's address it offers to
start one (local addresses only) instead of failing.  Chats are managed in
``screens/chat.py``; the conversation itself lives in ``widgets/conversation.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from localllm import paths
from localllm.api._httpx import httpx
from localllm.api.client import AsyncClient
from localllm.api.daemon import ensure_daemon, is_local_url
from localllm.errors import LocalLLMError
from localllm.tui.screens.chat import ChatScreen
from localllm.tui.screens.dialogs import ConfirmScreen, HelpScreen
from localllm.tui.sessions import Sessions

if TYPE_CHECKING:
    from localllm.mcp.servers import ServerSpec

_DARK, _LIGHT = "textual-dark", "textual-light"


class LocalLLMApp(App[None]):
    CSS_PATH = "localllm.tcss"
    TITLE = "localllm"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help"),
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),
        Binding("ctrl+q", "quit", "Quit"),
    ]

    def __init__(
        self,
        host: str | None = None,
        *,
        model: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sessions: Sessions | None = None,
        export_dir: Path | None = None,
        starter: Callable[[str], Any] = ensure_daemon,
        theme: str | None = None,
        mcp_servers: Sequence[ServerSpec] = (),
        trust_tools: bool = False,
    ) -> None:
        """``transport``, ``sessions`` and ``starter`` are injectable for tests."""
        super().__init__()
        self.client = AsyncClient(host, transport=transport)
        self.sessions = sessions or Sessions(paths.chats_db())
        self.export_dir = export_dir or Path.cwd()
        self.initial_model = model
        self.starter = starter
        self.chat_screen = ChatScreen(self.client, self.sessions, self.export_dir)
        self.ready = asyncio.Event()  # set once the model is resolved (tests, the bench)
        if theme:
            self.theme = theme
        self.mcp_servers = list(mcp_servers)
        self.trust_tools = trust_tools
        self.tools_file: str | None = None  # the settings' MCP file whose servers are open

    def on_mount(self) -> None:
        self.push_screen(self.chat_screen)
        self.startup()
        if self.mcp_servers:
            self.open_tools(self.mcp_servers)

    def on_chat_screen_settings_applied(self, event: ChatScreen.SettingsApplied) -> None:
        """Without ``--mcp``, the chat's settings name the MCP file and the trust."""
        if self.mcp_servers:
            return
        settings = event.settings
        self.trust_tools = settings.trust_tools
        tools = self.chat_screen.conversation.tools
        if settings.mcp_file == self.tools_file:
            if tools is not None:
                tools.trusted = settings.trust_tools
            return
        self.workers.cancel_group(self, "mcp")
        self.chat_screen.conversation.tools = None
        self.tools_file = settings.mcp_file
        if settings.mcp_file is None:
            return
        from localllm.mcp.servers import read_servers

        try:  # checked when saved, but the file may have changed since
            servers = read_servers(Path(settings.mcp_file).expanduser())
        except LocalLLMError as exc:
            self.notify(str(exc), title="MCP", severity="error", timeout=15)
            return
        self.open_tools(servers)

    @work(group="mcp")
    async def open_tools(self, servers: Sequence[ServerSpec]) -> None:
        """MCP servers, open until the app exits or the chat's settings name others (the
        sessions must be left by the task that opened them: this worker, cancelled)."""
        from localllm.errors import ToolServerError
        from localllm.mcp.hub import ToolHub
        from localllm.tui.mcptools import TuiTools

        conversation = self.chat_screen.conversation
        tools: TuiTools | None = None
        try:
            # The servers' stderr must not draw over the app.
            with open(os.devnull, "w", encoding="utf-8") as errlog:
                async with ToolHub(servers, errlog=errlog) as hub:
                    tools = conversation.tools = TuiTools(hub, self.trust_tools)
                    self.notify(f"MCP tools: {', '.join(hub.tools) or 'none'}")
                    await asyncio.Event().wait()  # until cancelled: the app's exit, other tools
        except ToolServerError as exc:
            self.notify(str(exc), title="MCP", severity="error", timeout=15)
        finally:
            if conversation.tools is tools:  # not the tools of the servers opened next
                conversation.tools = None

    async def on_unmount(self) -> None:
        await self.client.aclose()
        self.sessions.close()

    @work(exclusive=True, group="startup")
    async def startup(self) -> None:
        """Reach the daemon (offering to start it), then pick the model to chat with."""
        try:
            if await self._reachable():
                await self._choose_model()
        finally:
            self.ready.set()

    async def _reachable(self) -> bool:
        url = self.client.base_url
        try:
            await self.client.heartbeat()
            return True
        except LocalLLMError:
            pass
        status = self.chat_screen.status.status
        if not is_local_url(url):
            status.note = "daemon unreachable"
            self.chat_screen.show_status()
            self.notify(f"Nothing answers at {url}", severity="error", timeout=10)
            return False
        question = f"The localllm daemon is not running at {url}.\nStart it now?"
        if not await self.push_screen_wait(ConfirmScreen(question, "Start it", "Not now")):
            status.note = "daemon not running"
            self.chat_screen.show_status()
            return False
        self.notify("Starting the daemon…")
        try:
            await asyncio.to_thread(self.starter, url)
        except LocalLLMError as exc:
            self.notify(str(exc), title="Could not start the daemon", severity="error", timeout=15)
            return False
        self.notify("Daemon started")
        return True

    async def _choose_model(self) -> None:
        try:
            local = [m["name"] for m in await self.client.list()]
        except LocalLLMError as exc:
            self.notify(str(exc), severity="error")
            return
        recent = [c.model for c in self.sessions.chats()]
        wanted = [self.initial_model] if self.initial_model else [*recent, *sorted(local)]
        model = next((m for m in wanted if m in local or _with_latest(m) in local), None)
        if self.initial_model and model is None:
            self.notify(
                f"{self.initial_model} is not pulled yet: Ctrl+O to pull it", severity="warning"
            )
        if model is not None:
            self.chat_screen.use_model(model)
        elif not local:
            self.notify("No local models yet: press Ctrl+O, then s to search or p to pull one")

    # -- app-wide actions ---------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        self.theme = _LIGHT if self.current_theme.dark else _DARK

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        chat = self.chat_screen
        commands: list[tuple[str, str, Callable[[], Any]]] = [
            ("New chat", "Start a new conversation (Ctrl+N)", chat.action_new_chat),
            ("Models", "Pick, search, pull, delete or inspect models (Ctrl+O)", chat.action_models),
            ("Chat settings", "System prompt, sampling, keep-alive (Ctrl+S)", chat.action_settings),
            ("Rename chat", "Give this chat a new title (F2)", chat.action_rename),
            ("Delete chat", "Delete this chat from the list", chat.action_delete_chat),
            (
                "Export chat as Markdown",
                "Write this chat to a .md file",
                partial(chat.action_export, "md"),
            ),
            (
                "Export chat as JSON",
                "Write this chat to a .json file",
                partial(chat.action_export, "json"),
            ),
            (
                "Edit last message",
                "Put your last message back in the prompt (Ctrl+E)",
                chat.action_edit_last,
            ),
            ("Regenerate reply", "Ask again for the last reply (Ctrl+R)", chat.action_regenerate),
            (
                "Copy last reply",
                "Copy the last reply to the clipboard (Ctrl+Y)",
                chat.action_copy_last,
            ),
            ("Toggle chat list", "Show or hide the sidebar (Ctrl+B)", chat.action_toggle_sidebar),
            (
                "Toggle light/dark",
                "Switch between the light and dark theme (Ctrl+T)",
                self.action_toggle_theme,
            ),
        ]
        if screen is chat:
            for title, help_text, callback in commands:
                yield SystemCommand(title, help_text, callback)


def _with_latest(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
