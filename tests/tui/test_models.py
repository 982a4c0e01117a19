"""The model picker against the real daemon: list, pick, details, delete, pull from the Hub
stand-in; pull progress (speed, ETA) and cancelling with the scripted daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Label

from localllm.tui.screens.dialogs import AskScreen, ConfirmScreen
from localllm.tui.screens.models import DetailsScreen, ModelsScreen
from localllm.tui.screens.pull import PullScreen, RateMeter
from tests.support.daemon import Daemon
from tests.support.tui import MODEL, make_app, run_app, send, wait_for
from tests.support.tui_fakes import FakeDaemon, fake_app

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)


async def open_models(pilot: Pilot[None]) -> ModelsScreen:
    await pilot.press("ctrl+o")
    screen = pilot.app.screen
    assert isinstance(screen, ModelsScreen)
    await wait_for(lambda: bool(screen.rows))
    return screen


def test_picker_lists_models_with_size_quant_context_and_loaded(
    tui_daemon: Daemon, tmp_path: Path
) -> None:
    app = make_app(tui_daemon.url, tmp_path, model=MODEL)

    async def scenario(pilot: Pilot[None]) -> None:
        await send(pilot, "hello")  # loads tiny-chat
        screen = await open_models(pilot)
        rows = {r.name: r for r in screen.rows}
        assert {"tiny-chat:latest", "broken:latest", "spare:latest"} <= set(rows)
        tiny = rows["tiny-chat:latest"]
        assert tiny.context == 2048 and tiny.quant and tiny.size > 0
        assert tiny.where == "100% CPU"
        assert rows["spare:latest"].context == 512 and rows["spare:latest"].where == ""
        table = screen.query_one(DataTable)
        assert table.row_count == len(screen.rows)
        assert table.get_row_at(screen.rows.index(tiny))[4] == "2048"
        # The cursor starts on the chat's model; Enter picks the highlighted one.
        assert screen.selected() == tiny
        await pilot.press("up")  # sorted by name: tiny-chat comes last
        picked = screen.selected()
        assert picked is not None and picked != tiny
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat_screen.model == picked.name

    run_app(app, scenario)


def test_details_and_delete_with_confirmation(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = make_app(tui_daemon.url, tmp_path, model="spare:latest")

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_models(pilot)
        selected = screen.selected()
        assert selected is not None and selected.name == "spare:latest"
        await pilot.press("i")
        await wait_for(lambda: isinstance(app.screen, DetailsScreen))
        details = app.screen
        assert isinstance(details, DetailsScreen)
        assert "# spare:latest" in details.text and "| Context | 512 |" in details.text
        await pilot.press("escape")
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")  # declined: nothing happens
        await pilot.pause()
        assert "spare:latest" in [r.name for r in screen.rows]
        await pilot.press("d")
        await wait_for(lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(lambda: "spare:latest" not in [r.name for r in screen.rows])
        assert [m["name"] for m in await app.client.list() if m["name"] == "spare:latest"] == []

    run_app(app, scenario)


def test_pull_from_the_hub_shows_progress_then_the_model(
    hub_daemon: Daemon, tmp_path: Path
) -> None:
    app = make_app(hub_daemon.url, tmp_path)
    name = "hf.co/someone/Tiny-GGUF:Q8_0"

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("ctrl+o")
        screen = app.screen
        assert isinstance(screen, ModelsScreen)
        await pilot.press("p")
        await wait_for(lambda: isinstance(app.screen, AskScreen))
        await pilot.press(*name, "enter")
        await wait_for(lambda: isinstance(app.screen, PullScreen))
        pull = app.screen
        assert isinstance(pull, PullScreen)
        await wait_for(lambda: app.screen is screen and bool(screen.rows), timeout=60)
        assert pull.failed is None and pull.status_lines[-1] == "success"
        assert any(s.startswith("pulling") for s in pull.status_lines)
        assert [r.name for r in screen.rows] == [name]
        assert screen.rows[0].quant.upper() == "Q8_0"

    run_app(app, scenario)


def test_pull_shows_speed_and_eta_and_escape_cancels(tmp_path: Path) -> None:
    fake = FakeDaemon(pull_steps=400)
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        app.push_screen(PullScreen("some/model"))
        await pilot.pause()
        pull = app.screen
        line = pull.query_one("#line", Label)
        await wait_for(lambda: "ETA" in str(line.render()))
        text = str(line.render())
        assert text.startswith("pulling abc123") and "/ 10 MB" in text and "B/s" in text
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.chat_screen
        await wait_for(lambda: fake.pull_closed)

    run_app(app, scenario)


def test_rate_meter_smooths_and_restarts() -> None:
    meter = RateMeter(smoothing=0.5)
    assert meter.update(0, 0.0) is None
    assert meter.update(1000, 1.0) == 1000
    assert meter.update(3000, 2.0) == 1500  # half the new 2000 B/s, half the old
    assert meter.update(0, 3.0) == 1500  # a restart (resume) does not go negative
