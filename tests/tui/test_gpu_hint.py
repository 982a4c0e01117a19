"""``chat``'s status bar names the command that would put an unused GPU to work, once a day.

The daemon sees a GPU through a stand-in ``nvidia-smi`` (tests/support/fake_gpu.py); the
app asks for the hint once a model is loaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from localllm.api.hint import state_file
from tests.support.daemon import start_daemon
from tests.support.fake_gpu import fake_gpu
from tests.support.models import add_tiny
from tests.support.tui import CONTENTS_TEMPLATE, MODEL, make_app, run_app, send, wait_for

pytestmark = pytest.mark.slow  # a daemon of its own


def test_the_status_bar_says_it_once_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(tmp_path, monkeypatch)
    add_tiny(tmp_path, "tiny-chat", chat_template=CONTENTS_TEMPLATE)
    with start_daemon(tmp_path) as d:
        seen: list[str] = []

        async def scenario(pilot: Pilot[None]) -> None:
            screen = await send(pilot, "hello")
            await wait_for(lambda: screen.status.status.loaded)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            seen.append(screen.status.status.text())

        for folder in ("first", "second"):
            (tmp_path / folder).mkdir()
        run_app(make_app(d.url, tmp_path / "first", model=MODEL), scenario)
        assert "GPU unused: localllm backends build cuda" in seen[0]
        assert state_file().exists()
        # The same day, a second session: the line is the usual one.
        run_app(make_app(d.url, tmp_path / "second", model=MODEL), scenario)
        assert "GPU unused" not in seen[1] and "100% CPU" in seen[1]
