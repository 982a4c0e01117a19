"""Snapshots of the model search (pytest-textual-snapshot): the results with the fit column
at 80×24 and 160×48, and a pull refused as too big with its reason and the override.

They run against the scripted daemon (tests/support/tui_search_fakes.py: fixed repos, quants and
fits on a machine with one 8 GB GPU), so nothing that varies between runs reaches the
screen.  After a deliberate change of the look, review and update them with
``pytest tests/tui/test_search_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from localllm.tui.screens.pull import PullScreen
from localllm.tui.screens.search import SearchScreen
from tests.support.tui import SIZES, settle
from tests.support.tui_fakes import fake_app
from tests.support.tui_search_fakes import TOO_BIG, SearchFake

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

Snap = Callable[..., bool]


async def until(condition: Callable[[], bool]) -> None:
    # Not workers.wait_for_complete(): the workers that opened these screens wait on them.
    for _ in range(250):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the screen did not get there in time")


async def searched(pilot: Pilot[None]) -> None:
    """Models, s, "llama3.2", Enter; then Tab to the quants and down to the partial fit."""
    await settle(pilot)
    await pilot.press("ctrl+o", "s")
    await until(lambda: isinstance(pilot.app.screen, SearchScreen))
    search = pilot.app.screen
    assert isinstance(search, SearchScreen)
    await pilot.press(*"llama3.2", "enter")
    await until(lambda: bool(search.results) and not search.searching)
    await pilot.press("tab", "down", "down")
    await pilot.pause()


async def refused(pilot: Pilot[None]) -> None:
    await searched(pilot)
    await pilot.press("down", "enter")
    await until(
        lambda: isinstance(pilot.app.screen, PullScreen) and pilot.app.screen.refused is not None
    )
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_search_results_with_fit(snap_compare: Snap, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(fake_app(tmp_path, SearchFake()), terminal_size=size, run_before=searched)


def test_search_pull_refused_as_too_big(snap_compare: Snap, tmp_path: Path) -> None:
    fake = SearchFake()
    assert snap_compare(fake_app(tmp_path, fake), terminal_size=(80, 24), run_before=refused)
    pulls = [body for method, path, body in fake.requests if path == "/api/pull"]
    assert pulls == [{"model": TOO_BIG, "force": False, "stream": True}]
