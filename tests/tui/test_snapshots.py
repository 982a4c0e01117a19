"""Snapshots of the main screens at 80×24 and 160×48 (pytest-textual-snapshot).

They run against the scripted daemon with a seeded chat store (fixed
timestamps, fixed stats), so nothing that varies between runs reaches the
screen.  After a deliberate change of the look, review and update them with
``pytest tests/tui/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from localllm.tui.app import LocalLLMApp
from localllm.tui.screens.models import ModelsScreen
from tests.support.tui import SIZES, settle
from tests.support.tui_fakes import fake_app

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

Snap = Callable[..., bool]


async def open_seeded_chat(pilot: Pilot[None]) -> None:
    await settle(pilot)
    app = pilot.app
    assert isinstance(app, LocalLLMApp)
    await app.chat_screen.open_chat(1)
    await app.workers.wait_for_complete()
    await pilot.pause()


def then(*steps: Callable[[Pilot[None]], Awaitable[Any]]) -> Callable[[Pilot[None]], Any]:
    async def run(pilot: Pilot[None]) -> None:
        for step in steps:
            await step(pilot)
            await pilot.pause()

    return run


def press(*keys: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run(pilot: Pilot[None]) -> None:
        await pilot.press(*keys)
        await pilot.pause()

    return run


async def models_loaded(pilot: Pilot[None]) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, ModelsScreen)
    # Not workers.wait_for_complete(): the worker that opened this screen waits for it.
    for _ in range(100):
        if screen.rows:
            break
        await asyncio.sleep(0.02)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_chat_screen(snap_compare: Snap, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(fake_app(tmp_path), terminal_size=size, run_before=open_seeded_chat)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_new_chat_screen(snap_compare: Snap, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(fake_app(tmp_path), terminal_size=size, run_before=settle)


def test_chat_screen_light(snap_compare: Snap, tmp_path: Path) -> None:
    app = fake_app(tmp_path, theme="textual-light")
    assert snap_compare(app, terminal_size=(160, 48), run_before=open_seeded_chat)


def test_narrow_with_chat_list(snap_compare: Snap, tmp_path: Path) -> None:
    assert snap_compare(
        fake_app(tmp_path),
        terminal_size=(80, 24),
        run_before=then(open_seeded_chat, press("ctrl+b")),
    )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_models_screen(snap_compare: Snap, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(
        fake_app(tmp_path),
        terminal_size=size,
        run_before=then(settle, press("ctrl+o"), models_loaded),
    )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help_screen(snap_compare: Snap, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(
        fake_app(tmp_path), terminal_size=size, run_before=then(settle, press("f1"))
    )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_settings_screen(snap_compare: Snap, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(
        fake_app(tmp_path), terminal_size=size, run_before=then(open_seeded_chat, press("ctrl+s"))
    )
