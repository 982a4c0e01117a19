"""The exact fit of one quant before pulling it: a dry-run pull, shown as a table.

The search plans every quant from one header per repo (weights scaled by file
size); this reads the quant's own header over range requests (``/api/pull``
with ``dry_run``: nothing is downloaded) and shows the files, the download
size, where the layers go, memory by device, the largest context that fits
and the planner's reason, as ``localllm pull NAME --dry-run`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from localllm.errors import LocalLLMError
from localllm.format import format_bytes
from localllm.tui.search_format import (
    as_dict,
    as_int,
    as_list,
    fit_of,
    fit_summary,
    memory_text,
)

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient


def plan_rows(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The dry run's last event as (label, value) rows, empty values left out."""
    fit = fit_of(result)

    def sized(f: Any) -> str:
        return (
            f"{f.get('file', '')} ({format_bytes(as_int(f.get('size')))})"
            if isinstance(f, dict)
            else ""
        )

    files, caps = as_list(result.get("files")), as_list(result.get("capabilities"))
    details, memory = as_dict(result.get("details")), as_dict(fit.get("memory"))
    model = " ".join(
        str(details[k])
        for k in ("family", "parameter_size", "quantization_level")
        if details.get(k)
    )
    rows = [
        ("source", str(result.get("source") or "")),
        ("files", "\n".join(sized(f) for f in files)),
        ("projector", sized(result.get("projector"))),
        (
            "download",
            format_bytes(as_int(result.get("size"))) if as_int(result.get("size")) else "",
        ),
        ("model", model),
        ("capabilities", ", ".join(str(c) for c in caps)),
        ("placement", fit_summary(fit)),
        (
            "memory",
            "\n".join(
                f"{'RAM' if d == 'CPU' else d}  {format_bytes(as_int(n))}"
                for d, n in memory.items()
            ),
        ),
        ("total", memory_text(fit)),
        (
            "largest context",
            f"{as_int(fit.get('max_context'))} tokens" if as_int(fit.get("max_context")) else "",
        ),
        (
            "training context",
            f"{as_int(result.get('context_length'))} tokens"
            if as_int(result.get("context_length"))
            else "",
        ),
        ("planner", str(fit.get("reason") or "")),
    ]
    return [(k, v) for k, v in rows if v and v != "-"]


class RemoteDetailsScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,i,q", "close", "Close")]

    def __init__(self, model: str, client: AsyncClient) -> None:
        super().__init__(classes="dialog-screen")
        self.model = model
        self.client = client
        self.result: Mapping[str, Any] | None = None  # the dry run's last event
        self.failed: str | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog remote"):
            yield Label(Text(f"{self.model}: will it fit?"), classes="question")
            yield Static(
                "reading its header over range requests (nothing is downloaded)…", id="plan"
            )
            yield Label("Escape: close", classes="hint")

    def on_mount(self) -> None:
        self.read_plan()

    @work(exclusive=True, group="dry-run")
    async def read_plan(self) -> None:
        body = self.query_one("#plan", Static)
        try:
            async for event in self.client.pull(self.model, dry_run=True):
                if event.get("dry_run"):
                    self.result = event
                elif event.get("status"):
                    body.update(Text(str(event["status"])))
        except LocalLLMError as exc:
            self.failed = str(exc)
            body.update(Text(f"Could not plan {self.model}: {exc}"))
            body.add_class("error")
            return
        if self.result is None:
            self.failed = "the daemon sent no plan"
            body.update(Text(self.failed))
            body.add_class("error")
            return
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for label, value in plan_rows(self.result):
            table.add_row(label, Text(value))  # Text: the values come from the Hub
        body.update(table)

    def action_close(self) -> None:
        self.dismiss(None)
