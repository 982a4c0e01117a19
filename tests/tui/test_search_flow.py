"""The model picker's search, headless against the real daemon, the Hub stand-in and the real
libllama: search by a library name, see each quant's fit, read the exact plan, pull with the
progress bar, chat with the model; a quant too big for the machine is refused with its
reason before any download, and ``f`` pulls it anyway.

The stand-in Hub serves the tiny model (tests/support/tinymodel.py) under the repo and file the
built-in catalogue's ``llama3.2`` points at, so ``llama3.2`` finds it through the catalogue
as it would on the real Hub; the other ``llama3.2`` sizes point at repos the stand-in
lacks, and are left out.  A Hub that fails shows the daemon's error in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Label

from localllm import paths
from localllm.format import format_bytes
from localllm.tui.screens.models import ModelsScreen
from localllm.tui.screens.pull import REFUSED_HINT, PullScreen
from localllm.tui.screens.search import SearchScreen
from localllm.tui.screens.search_details import RemoteDetailsScreen, plan_rows
from localllm.tui.search_format import refusal
from tests.support.daemon import Daemon, start_daemon
from tests.support.ggufmeta import SHAPES, write_gguf
from tests.support.hubstub import HubStub
from tests.support.tinymodel import expected_greedy, make_tiny_model
from tests.support.tui import CONTENTS_TEMPLATE, make_app, run_app, send, wait_for
from tests.support.tui_search_fakes import REFUSAL

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

REPO, FILE = "bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf"
NAME = f"hf.co/{REPO}:Q4_K_M"
REFUSAL_WORDING = re.compile(
    r"hf\.co/\S+ does not fit on this machine \(too big: needs .+\); "
    r"to pull it anyway: localllm pull \S+ --force \(API: \"force\": true\)"
)
FIT_WORDS = re.compile(r"CPU only|all \d+ layers on GPU|\d+/\d+ layers on GPU")


@pytest.fixture
def search_daemon(
    hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Daemon]:
    monkeypatch.delenv("LOCALLLM_CATALOG_REPO", raising=False)  # the built-in catalogue
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    hub.add_file(REPO, FILE, make_tiny_model(tmp_path / "tiny", chat_template=CONTENTS_TEMPLATE))
    hub.set_meta(REPO, downloads=1_234_567, likes=340, updated="2025-01-15T10:00:00Z")
    with start_daemon(tmp_path) as d:
        yield d


def cell(table: DataTable[object], row: int, column: int) -> str:
    return str(table.get_row_at(row)[column])


def label(screen: SearchScreen | PullScreen, selector: str) -> str:
    return str(screen.query_one(selector, Label).render())


async def open_search(pilot: Pilot[None]) -> SearchScreen:
    await pilot.press("ctrl+o")
    assert isinstance(pilot.app.screen, ModelsScreen)
    await pilot.press("s")
    await wait_for(lambda: isinstance(pilot.app.screen, SearchScreen))
    search = pilot.app.screen
    assert isinstance(search, SearchScreen)
    assert pilot.app.focused is search.query_one("#query")
    return search


async def run_search(pilot: Pilot[None], search: SearchScreen, query: str) -> None:
    search.query_one("#query", Input).value = ""
    search.action_focus_query()
    await pilot.press(*query, "enter")
    await pilot.pause()
    await wait_for(lambda: not search.searching, timeout=60)
    await pilot.pause()


def test_search_pick_a_quant_see_its_fit_pull_it_and_chat(
    search_daemon: Daemon, hub: HubStub, tmp_path: Path
) -> None:
    app = make_app(search_daemon.url, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        search = await open_search(pilot)
        # The Hub failing: the daemon's error in place of the results, the query kept.
        hub.api_status = 503
        await run_search(pilot, search, "llama3.2")
        note = search.query_one("#note", Label)
        assert note.has_class("error") and label(search, "#note").startswith("Search failed: ")
        assert search.results == [] and search.query_one("#query", Input).value == "llama3.2"
        hub.api_status = None
        await run_search(pilot, search, "llama3.2")
        assert not note.has_class("error") and label(search, "#note").startswith("1 repo for")
        repos = search.query_one("#repos", DataTable)
        names = [m["repo"] for m in search.results]
        assert names == [REPO]  # found through the catalogue: "llama3.2" is not in its name
        assert [cell(repos, 0, c) for c in range(5)] == [
            REPO,
            "1.2M",
            "340",
            "completion",
            "2025-01-15",
        ]
        info = label(search, "#repo-info")
        assert f"hf.co/{REPO}" in info and "library: llama3.2, llama3.2:3b" in info
        assert "context 2048" in info
        # Its one quant, with its size, its fit on this machine and the memory it takes.
        quants = search.query_one("#quants", DataTable)
        assert quants.row_count == 1 and cell(quants, 0, 0) == "Q4_K_M"
        size = hub.repos[REPO][FILE].size
        assert search.quants[0]["size"] == size and cell(quants, 0, 1) == format_bytes(size)
        assert FIT_WORDS.fullmatch(cell(quants, 0, 2))
        assert re.fullmatch(r"\d+(\.\d)? [KMG]B at 512 tokens", cell(quants, 0, 3))
        assert re.match(r"(RAM|\w+\d) \d", label(search, "#fit-line"))
        # Enter moves to the quants; i reads the header for the exact plan (a dry run).
        await pilot.press("enter")
        assert app.focused is quants
        await pilot.press("i")
        await wait_for(lambda: isinstance(app.screen, RemoteDetailsScreen))
        details = app.screen
        assert isinstance(details, RemoteDetailsScreen)
        await wait_for(lambda: details.result is not None or details.failed is not None, 60)
        assert details.failed is None and details.result is not None
        rows = dict(plan_rows(details.result))
        assert rows["source"] == NAME and FIT_WORDS.fullmatch(rows["placement"])
        assert rows["largest context"] == "2048 tokens" and FILE in rows["files"]
        assert [p for p in paths.models().rglob("*") if p.is_file()] == []  # nothing pulled
        await pilot.press("escape")
        # Enter pulls: the progress bar, then back in the model list on the new model.
        hub.delay_s = 0.05  # the tiny model downloads in a blink: slow it to watch the bar
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, PullScreen))
        pull = app.screen
        assert isinstance(pull, PullScreen)
        await wait_for(lambda: isinstance(app.screen, ModelsScreen), timeout=60)
        assert pull.failed is None and pull.status_lines[-1] == "success"
        assert any(FIT_WORDS.search(s) for s in pull.status_lines if s.startswith("fits: "))
        models = app.screen
        assert isinstance(models, ModelsScreen)
        await wait_for(lambda: bool(models.rows))
        picked = models.selected()
        assert picked is not None and picked.name == NAME
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat_screen.model == NAME
        chat = await send(pilot, "hello")
        assert chat.history[-1].content == expected_greedy("hello")

    run_app(app, scenario, size=(120, 36))


def test_a_quant_too_big_is_refused_with_its_reason_and_pulled_anyway_on_f(
    search_daemon: Daemon, hub: HubStub, tmp_path: Path
) -> None:
    # A 70B in F32: 282 GB (sparse here), more than RAM and VRAM anywhere these tests run.
    huge = write_gguf(tmp_path / "huge-F32.gguf", SHAPES["70b"], "F32")
    hub.add_file("big/Huge-GGUF", "huge-F32.gguf", huge, sha256="9" * 64)
    app = make_app(search_daemon.url, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        search = await open_search(pilot)
        await run_search(pilot, search, "huge")
        quants = search.query_one("#quants", DataTable)
        assert cell(quants, 0, 0) == "F32" and cell(quants, 0, 2) == "too big"
        assert re.fullmatch(r"too big: needs .+ available", label(search, "#fit-line"))
        await pilot.press("enter", "enter")  # to the quants, then pull
        await wait_for(lambda: isinstance(app.screen, PullScreen))
        pull = app.screen
        assert isinstance(pull, PullScreen)
        await wait_for(lambda: pull.failed is not None, timeout=60)
        # The daemon's reason, in place, without the CLI's --force advice; f is offered.
        assert pull.refused is not None and pull.refused == refusal(pull.failed or "")
        assert pull.refused.startswith("hf.co/big/Huge-GGUF:F32 does not fit on this machine")
        assert "--force" not in label(pull, "#line") and pull.refused in label(pull, "#line")
        assert label(pull, "#hint") == REFUSED_HINT and label(pull, "#title").startswith(
            "Not pulled: too big"
        )
        assert not pull.query_one("#bar").display
        assert pull.check_action("force", ()) and not pull.check_action("retry", ())
        assert hub.served["huge-F32.gguf"] < 8 << 20  # its header, nothing more
        assert await app.client.list() == []
        # The scripted daemon of the snapshots words it the same way.
        for message in (pull.failed, REFUSAL):
            assert REFUSAL_WORDING.fullmatch(message or ""), message
        # f: pulled with force: the daemon warns and downloads (slowly here), Escape stops it.
        hub.delay_s = 0.02
        await pilot.press("f")
        await wait_for(
            lambda: any(
                s.startswith("pulling ") and s != "pulling manifest" for s in pull.status_lines
            ),
            timeout=60,
        )
        assert pull.forced and pull.refused is None and pull.failed is None
        warnings = [s for s in pull.status_lines if s.startswith("warning: ")]
        assert warnings and "does not fit on this machine" in warnings[0]
        await pilot.press("escape")
        await wait_for(lambda: app.screen is search)
        assert await app.client.list() == []

    run_app(app, scenario, size=(120, 36))
