"""``localllm chat --mcp``: the TUI against the real daemon, a script model that calls a
tool, and the official ``mcp`` package's server over stdio (tests/support/mcpserver.py).

The model (tests/cli/test_run_mcp.py's) asked ``2+3?`` calls ``add``; after the tool
message ``sum=5`` it answers ``FIVE``, after any other ``NONE``.  Each call is asked
about in a dialog; the call and its result are shown folded.  Without ``--mcp`` the
chat's settings name the file (and whether to trust its tools).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Collapsible, Input, Label

from localllm import paths
from localllm.mcp.servers import read_servers
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.tui.app import LocalLLMApp
from localllm.tui.screens.dialogs import ConfirmScreen
from localllm.tui.screens.settings import SettingsScreen
from localllm.tui.widgets.toolcall import ToolCallView
from tests.cli.test_run_mcp import SCRIPTS, TEMPLATE
from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.mcpserver import stdio_config
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.tui import make_app, run_app, send, wait_for


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "tui-mcp", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_CONTEXT_LENGTH="2048"
    ) as tmp:
        gguf = make_script_model(tmp / "gguf", SCRIPTS, eos="<|im_end|>", chat_template=TEMPLATE)
        import_gguf(Store(paths.models()), parse_name("caller"), [gguf], params={"temperature": 0})
        with start_daemon(tmp) as daemon:
            yield daemon


def _app(d: Daemon, tmp_path: Path, calls: Path, trusted: bool) -> LocalLLMApp:
    servers = read_servers(stdio_config(tmp_path, calls))
    return make_app(d.url, tmp_path, model="caller", mcp_servers=servers, trust_tools=trusted)


async def _ask(pilot: Pilot[None], answer: str) -> list[str]:
    """Send the question, answer the dialog, wait for the model's text; the contents."""
    app = pilot.app
    assert isinstance(app, LocalLLMApp)
    conversation = app.chat_screen.conversation
    await wait_for(lambda: conversation.tools is not None)
    await send(pilot, "2+3?", wait=False)
    await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press(answer)
    await wait_for(lambda: len(conversation.history) == 4 and not conversation.generating)
    await pilot.pause()
    return [m.content.strip() for m in conversation.history]


def test_a_confirmed_call_is_shown_folded_and_answered(d: Daemon, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, LocalLLMApp)
        assert await _ask(pilot, "y") == ["2+3?", "", "sum=5", "FIVE"]
        (view,) = app.chat_screen.conversation.query(ToolCallView)
        fold = view.query_one(Collapsible)
        assert fold.collapsed and fold.title == "Tool add (calc): done"
        assert [m.role for m in app.chat_screen.conversation.history][2] == "tool"

    run_app(_app(d, tmp_path, calls, trusted=False), scenario)
    assert calls.read_text() == "add 2 3\n"


def test_a_refused_call_never_runs(d: Daemon, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, LocalLLMApp)
        history = await _ask(pilot, "n")
        assert history[2].startswith("The user refused") and history[3] == "NONE"
        (view,) = app.chat_screen.conversation.query(ToolCallView)
        assert view.query_one(Collapsible).title == "Tool add: refused"

    run_app(_app(d, tmp_path, calls, trusted=False), scenario)
    assert not calls.exists()


async def _set_mcp(pilot: Pilot[None], path: str, trust: bool) -> SettingsScreen:
    """Open the settings, name the MCP file (and the trust), press Ctrl+S."""
    await pilot.press("ctrl+s")
    await wait_for(lambda: isinstance(pilot.app.screen, SettingsScreen))
    screen = pilot.app.screen
    assert isinstance(screen, SettingsScreen)
    screen.query_one("#mcp_file", Input).value = path
    screen.query_one("#trust_tools", Checkbox).value = trust
    await pilot.press("ctrl+s")
    await pilot.pause()
    return screen


def test_the_settings_file_offers_its_tools_without_mcp(d: Daemon, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    config = stdio_config(tmp_path, calls)

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, LocalLLMApp)
        conversation = app.chat_screen.conversation
        assert conversation.tools is None  # no --mcp, no setting yet
        await _set_mcp(pilot, str(config), trust=True)
        assert conversation.settings.mcp_file == str(config)
        await wait_for(lambda: conversation.tools is not None)
        assert conversation.tools is not None and conversation.tools.trusted
        await send(pilot, "2+3?", wait=False)  # trusted: no dialog is asked
        await wait_for(lambda: len(conversation.history) == 4 and not conversation.generating)
        assert [m.content.strip() for m in conversation.history] == ["2+3?", "", "sum=5", "FIVE"]
        assert not isinstance(app.screen, ConfirmScreen)
        chat = app.chat_screen.chat
        assert chat is not None
        kept = app.sessions.get(chat.id).settings  # kept with the chat
        assert (kept.mcp_file, kept.trust_tools) == (str(config), True)
        await app.chat_screen.action_new_chat()  # a chat without the setting has no tools
        await wait_for(lambda: conversation.tools is None)

    run_app(make_app(d.url, tmp_path, model="caller"), scenario)
    assert calls.read_text() == "add 2 3\n"


def test_a_file_that_is_no_mcp_config_keeps_the_dialog_open(d: Daemon, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"servers": {}}', encoding="utf-8")

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, LocalLLMApp)
        screen = await _set_mcp(pilot, str(bad), trust=False)
        assert app.screen is screen
        error = str(screen.query_one("#error", Label).render())
        assert 'has no "mcpServers" object' in error
        screen.query_one("#mcp_file", Input).value = str(tmp_path / "absent.json")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is screen
        assert "cannot read the MCP config" in str(screen.query_one("#error", Label).render())
        assert app.chat_screen.settings.mcp_file is None

    run_app(make_app(d.url, tmp_path, model="caller"), scenario)


def test_mcp_wins_over_the_settings_file(d: Daemon, tmp_path: Path) -> None:
    """With ``--mcp``, a chat's MCP setting changes nothing: the flag's servers stay."""
    calls = tmp_path / "calls.txt"

    async def scenario(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, LocalLLMApp)
        conversation = app.chat_screen.conversation
        await wait_for(lambda: conversation.tools is not None)
        tools = conversation.tools
        await app.chat_screen.action_new_chat()
        await pilot.pause()
        assert conversation.tools is tools

    run_app(_app(d, tmp_path, calls, trusted=False), scenario)
