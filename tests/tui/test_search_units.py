"""The search screen's text helpers (pure), the dry-run table, and with the scripted daemon:
the pull dialog's in-place errors (a refusal offers ``f`` and sends ``force: true``, any
other failure offers ``r``), searches replaced or left while running, quants already
pulled; hostile fields from the daemon never raise."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Label

from localllm.format import format_count as count
from localllm.tui.screens.models import ModelsScreen
from localllm.tui.screens.pull import FAILED_HINT, REFUSED_HINT, PullScreen
from localllm.tui.screens.search import SearchScreen
from localllm.tui.screens.search_details import plan_rows
from localllm.tui.search_format import (
    fit_line,
    fit_summary,
    memory_text,
    pull_name,
    refusal,
    updated,
)
from tests.support.tui import run_app, wait_for
from tests.support.tui_fakes import fake_app, model_entry
from tests.support.tui_search_fakes import QUANTS, REFUSAL, RESULTS, TOO_BIG, SearchFake


def test_counts_dates_and_names() -> None:
    assert [count(n) for n in (0, 999, 5_400, 1_234_567, 2_500_000_000, -3)] == [
        "0",
        "999",
        "5.4K",
        "1.2M",
        "2.5B",
        "0",
    ]
    assert updated("2025-01-15T10:00:00.000Z") == "2025-01-15"
    assert [updated(v) for v in (None, 17, "yesterday", "")] == ["-"] * 4
    assert pull_name(RESULTS[0], QUANTS[0]) == "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M"


def test_fit_texts_for_each_verdict() -> None:
    gpu, _, partial, too_big, unknown = (q["fit"] for q in QUANTS)
    assert [fit_summary(f) for f in (gpu, partial, too_big, unknown)] == [
        "all 29 layers on GPU",
        "22/29 layers on GPU",
        "too big",
        "unknown",
    ]
    assert memory_text(gpu) == "2.9 GB at 4096 tokens" and memory_text(unknown) == "-"
    assert fit_line(gpu) == (
        "CUDA0 2.6 GB · RAM 300 MB at 4096 tokens — all 29 layers on CUDA0 (2.6 GB of 7.8 GB free)"
    )
    assert fit_line(too_big) == "too big: needs 14.1 GB of RAM, 12.0 GB available"
    assert fit_line(unknown) == "fit unknown: the header was not read in time"
    cpu = {
        "status": "cpu",
        "summary": "CPU only",
        "memory": {"CPU": 1_500_000_000},
        "context": 2048,
        "reason": "CPU only: no GPU the engine can use (1.5 GB of RAM)",
    }
    assert fit_summary(cpu) == "CPU only"
    assert fit_line(cpu) == (
        "RAM 1.5 GB at 2048 tokens — CPU only: no GPU the engine can use (1.5 GB of RAM)"
    )


@pytest.mark.parametrize(
    "fit",
    [
        {},
        {"status": "gpu"},
        {"status": 3, "summary": None, "memory": "lots"},
        {
            "status": "gpu",
            "summary": "all 2 layers on GPU",
            "memory": {"CUDA0": "x", "CPU": True},
            "context": "big",
            "reason": 7,
        },
        {"status": "too_big", "summary": "too big"},
    ],
)
def test_fit_texts_of_odd_answers_do_not_raise(fit: dict[str, object]) -> None:
    assert isinstance(fit_summary(fit), str) and isinstance(fit_line(fit), str)
    assert isinstance(memory_text(fit), str)


def test_refusal_is_the_reason_without_the_clis_advice() -> None:
    assert refusal(REFUSAL) == (
        f"{TOO_BIG} does not fit on this machine (too big: needs 14.1 GB of RAM, 12.0 GB available)"
    )
    assert refusal("model 'lama3.2' is not in the catalogue; closest: llama3.2") is None
    assert refusal("the Hub answered 503") is None


def test_plan_rows_of_a_dry_run() -> None:
    result = {
        "status": "success",
        "dry_run": True,
        "source": TOO_BIG,
        "files": [{"file": "a.gguf", "size": 2_000_000_000}],
        "projector": None,
        "size": 2_000_000_000,
        "details": {"family": "llama", "parameter_size": "3.2B", "quantization_level": "F32"},
        "context_length": 131072,
        "capabilities": ["completion", "tools"],
        "fit": {**QUANTS[0]["fit"], "max_context": 32768},
    }
    rows = dict(plan_rows(result))
    assert rows == {
        "source": TOO_BIG,
        "files": "a.gguf (2.0 GB)",
        "download": "2.0 GB",
        "model": "llama 3.2B F32",
        "capabilities": "completion, tools",
        "placement": "all 29 layers on GPU",
        "memory": "CUDA0  2.6 GB\nRAM  300 MB",
        "total": "2.9 GB at 4096 tokens",
        "largest context": "32768 tokens",
        "training context": "131072 tokens",
        "planner": "all 29 layers on CUDA0 (2.6 GB of 7.8 GB free)",
    }
    assert dict(plan_rows({"fit": "?", "files": 3, "details": []})) == {"placement": "unknown"}


def _hint(screen: PullScreen) -> str:
    return str(screen.query_one("#hint", Label).render())


def test_a_refused_pull_offers_f_which_pulls_with_force(tmp_path: Path) -> None:
    fake = SearchFake()
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        app.push_screen(PullScreen(TOO_BIG))
        pull = app.screen
        assert isinstance(pull, PullScreen)
        await wait_for(lambda: pull.refused is not None)
        assert _hint(pull) == REFUSED_HINT
        await pilot.press("r")  # not offered after a refusal: nothing happens
        await pilot.pause()
        assert [b for _, p, b in fake.requests if p == "/api/pull"] == [
            {"model": TOO_BIG, "force": False, "stream": True}
        ]
        await pilot.press("f")
        await wait_for(lambda: app.screen is not pull)
        assert [b["force"] for _, p, b in fake.requests if p == "/api/pull"] == [False, True]
        assert any(s.startswith("warning: ") for s in pull.status_lines)

    run_app(app, scenario)


class FlakyPull(SearchFake):
    """The first pull fails mid-stream; the next one works."""

    failures: int = 1

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/pull" and self.failures:
            self.failures -= 1
            self.requests.append(("POST", "/api/pull", json.loads(request.content)))
            return httpx.Response(200, content=self._broken())
        return await super().handle(request)

    async def _broken(self) -> AsyncIterator[bytes]:
        yield b'{"status": "pulling manifest"}\n'
        yield b'{"error": "the Hub answered 503 [busy]"}\n'


def test_another_failure_stays_in_place_and_r_tries_again(tmp_path: Path) -> None:
    fake = FlakyPull()
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        app.push_screen(PullScreen("hf.co/someone/Tiny-GGUF:Q8_0"))
        pull = app.screen
        assert isinstance(pull, PullScreen)
        await wait_for(lambda: pull.failed is not None)
        assert pull.refused is None and _hint(pull) == FAILED_HINT
        line = pull.query_one("#line", Label)
        assert str(line.render()) == "the Hub answered 503 [busy]" and line.has_class("error")
        await pilot.press("f")  # not offered: this was no refusal
        await pilot.pause()
        assert pull.is_current and pull.failed is not None
        await pilot.press("r")
        await wait_for(lambda: app.screen is not pull)
        assert pull.failed is None and pull.status_lines[-1] == "success"
        assert [b["force"] for _, p, b in fake.requests if p == "/api/pull"] == [False, False]

    run_app(app, scenario)


class SlowSearch(SearchFake):
    """A search that takes its time: long enough to leave or to search again."""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/search":
            await asyncio.sleep(1.0 if request.url.params["q"] == "slow" else 0)
        return await super().handle(request)


async def _search(pilot: Pilot[None], query: str) -> SearchScreen:
    if not isinstance(pilot.app.screen, SearchScreen):
        await pilot.press("ctrl+o")
        await wait_for(lambda: isinstance(pilot.app.screen, ModelsScreen))
        await pilot.press("s")
        await wait_for(lambda: isinstance(pilot.app.screen, SearchScreen))
    search = pilot.app.screen
    assert isinstance(search, SearchScreen)
    search.query_one("#query", Input).value = ""
    search.action_focus_query()
    await pilot.press(*query, "enter")
    await pilot.pause()
    return search


def test_escape_leaves_a_running_search_and_a_new_search_replaces_one(tmp_path: Path) -> None:
    fake = SlowSearch()
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        search = await _search(pilot, "slow")
        assert search.searching and search.query_one("#repos").loading
        await _search(pilot, "fast")  # replaces the slow one, whose answer never shows
        await wait_for(lambda: not search.searching)
        await asyncio.sleep(1.2)
        await pilot.pause()
        assert "for “fast”" in str(search.query_one("#note", Label).render())
        await _search(pilot, "slow")
        await pilot.press("escape")
        await wait_for(lambda: isinstance(app.screen, ModelsScreen))
        await asyncio.sleep(1.2)  # the cancelled search's answer finds no screen: no error
        await pilot.pause()
        assert isinstance(app.screen, ModelsScreen)

    run_app(app, scenario)


def test_a_quant_already_pulled_is_marked_and_picked_not_pulled_again(tmp_path: Path) -> None:
    fake = SearchFake()
    local = "hf.co/unsloth/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"
    fake.models.append(model_entry(local, 807_694_464, "Q4_K_M", "1.2B"))
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("ctrl+o")
        models = app.screen
        assert isinstance(models, ModelsScreen)
        await wait_for(lambda: len(models.rows) == 3)
        search = await _search(pilot, "llama")
        await wait_for(lambda: bool(search.results))
        await pilot.press("down", "enter")  # the second repo, then its quants
        quants = search.query_one("#quants", DataTable)
        assert app.focused is quants and str(quants.get_row_at(0)[4]) == "pulled"
        await pilot.press("enter")
        await wait_for(lambda: app.screen is models)
        await wait_for(lambda: getattr(models.selected(), "name", None) == local)
        assert not [p for _, p, _ in fake.requests if p == "/api/pull"]

    run_app(app, scenario)
