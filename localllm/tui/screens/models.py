"""The model picker: local models with size, quantization, context and whether loaded.

Enter picks the highlighted model for the chat, ``s`` (or ``/``) searches
Hugging Face for a new one (``screens/search.py``: quants, their fit, pull),
``p`` pulls one by name, ``d`` deletes (after a confirmation), ``i`` shows
details, ``r`` refreshes.  A model pulled from the search comes back
highlighted, one Enter away from the chat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Label, Markdown

from localllm.errors import LocalLLMError
from localllm.format import format_bytes, processor
from localllm.tui.format import context_length
from localllm.tui.screens.dialogs import AskScreen, ConfirmScreen
from localllm.tui.screens.pull import PullScreen
from localllm.tui.screens.search import SearchScreen

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient
    from localllm.api.wire import ShowResponse


@dataclass
class ModelRow:
    name: str
    size: int
    quant: str
    params: str
    context: int | None
    where: str  # "" when not loaded, else "100% CPU" and the like

    def cells(self) -> tuple[str, ...]:
        return (
            self.name,
            format_bytes(self.size),
            self.quant or "-",
            self.params or "-",
            str(self.context) if self.context else "-",
            self.where or "-",
        )


async def load_rows(client: AsyncClient) -> list[ModelRow]:
    """The client's ``list`` + ``ps``, and ``show`` per model for its context length."""
    models, running = await asyncio.gather(client.list(), client.ps())
    loaded = {m["name"]: processor(m.get("size", 0), m.get("size_vram", 0)) for m in running}

    async def ctx(name: str) -> int | None:
        try:
            return context_length(await client.show(name))
        except LocalLLMError:
            return None

    contexts = await asyncio.gather(*(ctx(m["name"]) for m in models))
    rows = []
    for m, c in zip(models, contexts, strict=True):
        details = m.get("details") or {}
        rows.append(
            ModelRow(
                m["name"],
                int(m.get("size", 0)),
                details.get("quantization_level", ""),
                details.get("parameter_size", ""),
                c,
                loaded.get(m["name"], ""),
            )
        )
    return sorted(rows, key=lambda r: r.name)


class ModelsScreen(Screen[str | None]):
    """Dismissed with the picked model's name, or None (Escape); ``client``: the daemon's."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("enter", "pick", "Use", priority=True),
        Binding("s,slash", "search", "Search"),
        Binding("p", "pull", "Pull"),
        Binding("d,delete", "delete", "Delete"),
        Binding("i", "details", "Details"),
        Binding("r", "refresh", "Refresh"),
    ]

    def __init__(self, client: AsyncClient, current: str = "") -> None:
        super().__init__()
        self.client = client
        self.current = current
        self.rows: list[ModelRow] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="models"):
            yield Label("Models", classes="title")
            yield DataTable(cursor_type="row", zebra_stripes=True, id="table")
            yield Label("", id="empty")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("NAME", "SIZE", "QUANT", "PARAMS", "CONTEXT", "LOADED")
        table.focus()
        self.action_refresh()

    @work(exclusive=True, group="models")
    async def action_refresh(self) -> None:
        try:
            self.rows = await load_rows(self.client)
        except LocalLLMError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return
        table = self.query_one(DataTable)
        table.clear()
        for row in self.rows:
            table.add_row(*row.cells(), key=row.name)
        names = [r.name for r in self.rows]
        if self.current in names:
            table.move_cursor(row=names.index(self.current))
        self.query_one("#empty", Label).update(
            ""
            if self.rows
            else "No local models yet: press s to search Hugging Face, or p to pull one by name."
        )

    def selected(self) -> ModelRow | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def action_pick(self) -> None:
        row = self.selected()
        if row is not None:
            self.dismiss(row.name)

    def action_close(self) -> None:
        self.dismiss(None)

    @work(group="models-dialog")
    async def action_search(self) -> None:
        name = await self.app.push_screen_wait(
            SearchScreen(self.client, local=[r.name for r in self.rows])
        )
        if name:
            self.current = name
            self.action_refresh()
            self.notify(f"{name} is here: Enter to chat with it")

    @work(group="models-dialog")
    async def action_pull(self) -> None:
        name = await self.app.push_screen_wait(
            AskScreen("Model to pull", placeholder="llama3.2, qwen3:8b or hf.co/user/repo:Q4_K_M")
        )
        if not name:
            return
        if await self.app.push_screen_wait(PullScreen(name, self.client)):
            self.current = name
            self.action_refresh()

    @contextmanager
    def _errors_shown(self) -> Iterator[None]:
        """The daemon's refusal of a call, shown as a notice; the rest of the block skipped."""
        try:
            yield
        except LocalLLMError as exc:
            self.notify(str(exc), severity="error")

    @work(group="models-dialog")
    async def action_delete(self) -> None:
        row = self.selected()
        if row is None or not await self.app.push_screen_wait(ConfirmScreen(f"Delete {row.name}?")):
            return
        with self._errors_shown():
            await self.client.delete(row.name)
            self.notify(f"Deleted {row.name}")
            self.action_refresh()

    @work(group="models-dialog")
    async def action_details(self) -> None:
        row = self.selected()
        if row is not None:
            with self._errors_shown():
                info = await self.client.show(row.name)
                await self.app.push_screen_wait(DetailsScreen(row, info))


def details_markdown(row: ModelRow, info: Mapping[str, Any]) -> str:
    details = info.get("details") or {}
    lines = [f"# {row.name}", "", "| | |", "|---|---|"]
    facts = [
        ("Size", format_bytes(row.size)),
        ("Family", details.get("family", "")),
        ("Parameters", details.get("parameter_size", "")),
        ("Quantization", details.get("quantization_level", "")),
        ("Context", str(row.context or "")),
        ("Loaded", row.where or "no"),
        ("Capabilities", ", ".join(info.get("capabilities") or [])),
    ]
    lines += [f"| {k} | {v} |" for k, v in facts if v]
    for title, key in (
        ("Parameters", "parameters"),
        ("System", "system"),
        ("Template", "template"),
    ):
        if info.get(key):
            lines += ["", f"## {title}", "", "```", str(info[key]).strip(), "```"]
    return "\n".join(lines)


class DetailsScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,i,q", "close", "Close")]

    def __init__(self, row: ModelRow, info: ShowResponse) -> None:
        super().__init__(classes="dialog-screen")
        self.text = details_markdown(row, info)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog details"):
            yield Markdown(self.text)

    def action_close(self) -> None:
        self.dismiss(None)
