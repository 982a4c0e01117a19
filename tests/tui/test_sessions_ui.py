"""Chats in the sidebar against the real daemon: persisted, reopened, renamed, deleted,
exported; and the start-up offer to start a daemon that is not running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList

from localllm import paths
from localllm.api.daemon import daemon_alive
from localllm.tui.screens.dialogs import AskScreen, ConfirmScreen
from tests.support.daemon import Daemon, free_port, stop_pid
from tests.support.tui import MODEL, make_app, run_app, send, wait_for

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)


def sidebar_titles(pilot: Pilot[None]) -> list[str]:
    sidebar = pilot.app.chat_screen.query_one("#sidebar", OptionList)  # type: ignore[attr-defined]
    return [str(sidebar.get_option_at_index(i).prompt) for i in range(sidebar.option_count)]


def test_chats_persist_reopen_rename_export_delete(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = make_app(tui_daemon.url, tmp_path, model=MODEL)

    async def first_session(pilot: Pilot[None]) -> None:
        await send(pilot, "hello")
        assert sidebar_titles(pilot) == ["hello"]
        await pilot.press("ctrl+n")
        assert app.chat_screen.history == [] and app.chat_screen.message_views() == []
        await send(pilot, "x")
        assert sidebar_titles(pilot) == ["x", "hello"]

    run_app(app, first_session)

    # A new app on the same store: the chats are there, and open with their messages.
    app = make_app(tui_daemon.url, tmp_path, model=MODEL)

    async def second_session(pilot: Pilot[None]) -> None:
        screen = app.chat_screen
        assert sidebar_titles(pilot) == ["x", "hello"]
        sidebar = screen.query_one("#sidebar", OptionList)
        sidebar.focus()
        sidebar.highlighted = 1
        await pilot.press("enter")
        await pilot.pause()
        assert [m.content for m in screen.history] == ["hello", "pqrstuvwxyz"]
        assert len(screen.message_views()) == 2
        assert screen.status.status.tok_s is not None  # the last reply's stats come back

        await pilot.press("f2")
        assert isinstance(app.screen, AskScreen)
        await pilot.press("ctrl+u", *"Greeting", "enter")
        await pilot.pause()
        assert sidebar_titles(pilot) == ["x", "Greeting"]

        md = screen.action_export("md")
        js = screen.action_export("json")
        assert md is not None and js is not None
        text = md.read_text()
        assert text.startswith("# Greeting\n") and "## User\n\nhello" in text
        assert "## Assistant\n\npqrstuvwxyz" in text
        data = json.loads(js.read_text())
        assert data["title"] == "Greeting" and data["model"] == MODEL
        assert [m["content"] for m in data["messages"]] == ["hello", "pqrstuvwxyz"]

        screen.action_delete_chat()
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(lambda: sidebar_titles(pilot) == ["x"])
        assert screen.chat is None and screen.history == []
        assert [c.title for c in app.sessions.chats()] == ["x"]

    run_app(app, second_session)


def test_palette_lists_the_chat_commands(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = make_app(tui_daemon.url, tmp_path, model=MODEL)

    async def scenario(pilot: Pilot[None]) -> None:
        titles = [c.title for c in app.get_system_commands(app.chat_screen)]
        for wanted in (
            "Models",
            "Chat settings",
            "Export chat as Markdown",
            "Export chat as JSON",
            "Delete chat",
            "Toggle light/dark",
        ):
            assert wanted in titles
        await pilot.press("f1")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert app.screen is app.chat_screen
        dark = app.current_theme.dark
        await pilot.press("ctrl+t")
        assert app.current_theme.dark is not dark

    run_app(app, scenario)


def test_offers_to_start_a_daemon_that_is_not_running(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    app = make_app(url, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(app.ready.is_set, timeout=60)
        assert daemon_alive(url, timeout=10)  # a loaded 2-core machine can be slow to answer
        assert app.chat_screen.status.status.note == ""

    try:
        run_app(app, scenario, wait_ready=False)
    finally:
        pid_file = paths.run_dir() / "localllm.pid"
        if pid_file.exists():
            stop_pid(int(pid_file.read_text()))


def test_declining_to_start_the_daemon_says_so(tmp_path: Path) -> None:
    app = make_app(f"http://127.0.0.1:{free_port()}", tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await wait_for(app.ready.is_set)
        assert "daemon not running" in app.chat_screen.status.status.text()
        # Sending without a daemon keeps the prompt and says why.
        app.chat_screen.use_model("tiny-chat:latest")
        app.chat_screen.prompt.load_text("hello")
        await pilot.press("enter")
        await wait_for(
            lambda: app.chat_screen.prompt.text == "hello" and not app.chat_screen.generating
        )
        assert app.chat_screen.history == []

    run_app(app, scenario, wait_ready=False)
