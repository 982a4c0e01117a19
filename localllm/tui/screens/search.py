"""Search Hugging Face from the model picker: pick a repo, pick a quant, see its fit, pull it.

The daemon does the work (``GET /api/search``: the Hub's GGUF search and the
library catalogue, each quant planned on the daemon's own devices); this
screen shows it, keyboard first:

* type words or a library name (``llama3.2``, ``qwen coder``), Enter searches;
* the results (repo, downloads, likes, capabilities, updated) take the focus;
  moving through them lists the highlighted repo's quants below, each with its
  size and fit (``all 29 layers on GPU``, ``22/29 layers on GPU``, ``CPU only``,
  ``too big``) and the memory a load would take;
* Enter on a repo moves to its quants; Enter (or ``p``) on a quant pulls it
  with the progress bar of ``screens/pull.py`` (refused with its reason if it
  cannot fit, with ``f`` to pull anyway), ``i`` reads its header for the exact
  fit first (a dry run: nothing is downloaded); ``/`` goes back to the query.

The search runs in a worker, so typing, moving and Escape never wait for the
Hub.  Dismissed with the name pulled (``hf.co/user/repo:QUANT``), or None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label

from localllm.errors import LocalLLMError
from localllm.format import format_bytes, format_count as count
from localllm.tui.screens.pull import PullScreen
from localllm.tui.screens.search_details import RemoteDetailsScreen
from localllm.tui.search_format import (
    as_int,
    as_list,
    capabilities,
    fit_line,
    fit_of,
    fit_status,
    fit_summary,
    memory_text,
    pull_name,
    updated,
)

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient
    from localllm.api.wire import SearchModel, SearchQuant

LIMIT = 10  # repos per search, as `localllm search`: each costs one header read
FIT_COLOURS = {
    "gpu": "text-success",
    "partial": "text-warning",
    "cpu": "text-primary",
    "too_big": "text-error",
}


class QuantTable(DataTable[Text]):
    """The quants of the highlighted repo; Enter pulls (a click only highlights: a
    download of gigabytes should take a key, not a stray click)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "screen.pull", "Pull")]


class SearchScreen(Screen[str | None]):
    """``local``: the names already pulled (marked, and picked rather than pulled again);
    ``client``: the daemon's, which searches and pulls."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("slash", "focus_query", "Search"),
        Binding("p", "pull", "Pull", show=False),
        Binding("i", "details", "Fit details"),
    ]

    def __init__(self, client: AsyncClient, local: Iterable[str] = (), query: str = "") -> None:
        super().__init__()
        self.client = client
        self.local = {n.lower() for n in local}
        self.query_text = query
        self.results: list[SearchModel] = []
        self.quants: list[SearchQuant] = []
        self.searching = False

    def compose(self) -> ComposeResult:
        with Vertical(id="search"):
            yield Label("Search Hugging Face for GGUF models", classes="title")
            yield Input(
                self.query_text,
                id="query",
                placeholder="a name or words: llama3.2, qwen coder, gemma 4b (Enter searches)",
            )
            yield Label(
                "Enter searches; the fit of each quant is planned on the daemon's machine.",
                id="note",
            )
            yield DataTable(cursor_type="row", zebra_stripes=True, id="repos")
            yield Label("", id="repo-info")
            yield QuantTable(cursor_type="row", zebra_stripes=True, id="quants")
            yield Label("", id="fit-line")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#repos", DataTable).add_columns(
            "REPO", "DOWNLOADS", "LIKES", "CAPABILITIES", "UPDATED"
        )
        self.query_one("#quants", DataTable).add_columns("QUANT", "SIZE", "FIT", "MEMORY", "")
        self.query_one("#query", Input).focus()
        if self.query_text.strip():
            self.run_search(self.query_text.strip())

    # -- searching --------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if query := event.value.strip():
            self.run_search(query)

    @work(exclusive=True, group="search")
    async def run_search(self, query: str) -> None:
        """Ask the daemon; a new search replaces one still running (exclusive)."""
        repos = self.query_one("#repos", DataTable)
        self.searching = True
        self._note(
            f"Searching Hugging Face for “{query}” (reading each repo's GGUF header "
            "to plan its fit)…"
        )
        repos.loading = True
        try:
            models = await self.client.search(query, LIMIT)
        except LocalLLMError as exc:
            self._note(f"Search failed: {exc}", error=True)
            return
        finally:
            self.searching = False
            if repos.is_attached:  # not when the screen closed while the search ran
                repos.loading = False
        self.results = [m for m in models if isinstance(m, dict)]
        repos.clear()
        for i, m in enumerate(self.results):
            repos.add_row(*self._repo_cells(m), key=str(i))
        if not self.results:
            self._show_quants(None)
            self._note(f"No GGUF models found for “{query}”.")
            return
        n = len(self.results)
        self._note(
            f"{n} repo{'s' * (n != 1)} for “{query}”: Enter or Tab to the quants, "
            "/ to search again."
        )
        repos.move_cursor(row=0)
        self._show_quants(0)
        repos.focus()

    def _note(self, text: str, *, error: bool = False) -> None:
        note = self.query_one("#note", Label)
        note.update(Text(text))
        note.set_class(error, "error")

    @staticmethod
    def _repo_cells(m: Mapping[str, Any]) -> tuple[Text, ...]:
        # Text, not markup: every field comes from the Hub.
        return (
            Text(str(m.get("repo") or m.get("name") or "")),
            Text(count(as_int(m.get("downloads"))), justify="right"),
            Text(count(as_int(m.get("likes"))), justify="right"),
            Text(capabilities(m)),
            Text(updated(m.get("updated"))),
        )

    # -- the highlighted repo's quants ------------------------------------------------
    def _show_quants(self, index: int | None) -> None:
        table = self.query_one("#quants", DataTable)
        info = self.query_one("#repo-info", Label)
        table.clear()
        model = self.results[index] if index is not None and index < len(self.results) else None
        # Read defensively, as search_format reads: an odd answer shows no quants.
        quants = model.get("quants") if model is not None else None
        self.quants = [q for q in quants if isinstance(q, dict)] if isinstance(quants, list) else []
        if model is None:
            info.update("")
            self._fit_line(None)
            return
        info.update(Text(self._repo_info(model)))
        info.set_class(not self.quants and bool(model.get("error")), "error")
        colours = self.app.get_css_variables()
        for i, q in enumerate(self.quants):
            fit = fit_of(q)
            colour = colours.get(FIT_COLOURS.get(fit_status(fit), ""))
            here = pull_name(model, q).lower() in self.local
            table.add_row(
                Text(str(q.get("tag", ""))),
                Text(format_bytes(as_int(q.get("size"))), justify="right"),
                Text(fit_summary(fit), style=colour or "dim"),
                Text(memory_text(fit)),
                Text("pulled" if here else ""),
                key=str(i),
            )
        self._fit_line(0 if self.quants else None)

    def _repo_info(self, m: Mapping[str, Any]) -> str:
        parts = [str(m.get("name", ""))]
        if catalog := as_list(m.get("catalog")):
            parts.append("library: " + ", ".join(str(c) for c in catalog))
        if as_int(m.get("context_length")):
            parts.append(f"context {as_int(m['context_length'])}")
        if self.quants:
            parts.append(f"{len(self.quants)} quant{'s' * (len(self.quants) != 1)}")
        elif m.get("error"):
            parts.append(f"files not listed: {m['error']}")
        else:
            parts.append("no GGUF model files listed in time")
        return " · ".join(parts)

    def _fit_line(self, index: int | None) -> None:
        line = self.query_one("#fit-line", Label)
        if index is None or not 0 <= index < len(self.quants):
            line.update("")
            return
        line.update(Text(fit_line(fit_of(self.quants[index]))))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "repos":
            self._show_quants(event.cursor_row)
        elif event.data_table.id == "quants":
            self._fit_line(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "repos" and self.quants:
            self.query_one("#quants", DataTable).focus()

    def selected(self) -> tuple[SearchModel, SearchQuant] | None:
        """The highlighted repo and quant, if there is one."""
        repos, quants = self.query_one("#repos", DataTable), self.query_one("#quants", DataTable)
        if not self.results or not self.quants:
            return None
        r, q = repos.cursor_row, quants.cursor_row
        if not (0 <= r < len(self.results) and 0 <= q < len(self.quants)):
            return None
        return self.results[r], self.quants[q]

    # -- actions ----------------------------------------------------------------------
    def action_focus_query(self) -> None:
        self.query_one("#query", Input).focus()

    def action_close(self) -> None:
        self.dismiss(None)

    @work(group="search-dialog")
    async def action_pull(self) -> None:
        picked = self.selected()
        if picked is None:
            return
        name = pull_name(*picked)
        if name.lower() in self.local:
            self.notify(f"{name} is already pulled")
            self.dismiss(name)
            return
        if await self.app.push_screen_wait(PullScreen(name, self.client)):
            self.dismiss(name)

    @work(group="search-dialog")
    async def action_details(self) -> None:
        picked = self.selected()
        if picked is not None:
            await self.app.push_screen_wait(RemoteDetailsScreen(pull_name(*picked), self.client))
