"""``localllm chat --mcp``: the TUI against the real daemon, a script model that calls a
tool, and the official ``mcp`` package's server over stdio (tests/support/mcpserver.py).

The model (tests/cli/test_run_mcp.py's) asked ``2+3?`` calls ``add``; after the tool
message ``sum=5`` it answers ``FIVE``, after any other ``NONE``.  Each call is asked
about in a dialog; the call and its result are shown folded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Collapsible

from localllm import paths
from localllm.mcp.servers import read_servers
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.tui.app import LocalLLMApp
from localllm.tui.screens.dialogs import ConfirmScreen
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
