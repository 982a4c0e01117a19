"""Pulling a model with a live progress bar (bytes, speed, ETA); Escape cancels.

Cancelling closes the pull stream, which makes the daemon stop the
download (a later pull resumes from the partial file).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, ProgressBar

from localllm.errors import LocalLLMError
from localllm.tui.format import pull_line

if TYPE_CHECKING:
    from localllm.tui.app import LocalLLMApp


class RateMeter:
    """Bytes per second, smoothed so the ETA does not jump with every chunk."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.last: tuple[float, int] | None = None
        self.rate: float | None = None

    def update(self, completed: int, now: float) -> float | None:
        if self.last is not None and now > self.last[0] and completed >= self.last[1]:
            sample = (completed - self.last[1]) / (now - self.last[0])
            self.rate = sample if self.rate is None else (
                self.smoothing * sample + (1 - self.smoothing) * self.rate)
        if self.last is None or completed < self.last[1] or now - self.last[0] >= 0.2:
            self.last = (now, completed)
        return self.rate


class PullScreen(ModalScreen[bool]):
    """Dismissed with True when the pull finished, False when cancelled or failed."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel pull")]

    def __init__(self, model: str) -> None:
        super().__init__(classes="dialog-screen")
        self.model = model
        self.failed: str | None = None
        self.status_lines: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog pull"):
            yield Label(f"Pulling {self.model}", classes="question")
            yield ProgressBar(total=None, show_eta=False, id="bar")
            yield Label("starting…", id="line")
            yield Label("Escape: cancel", classes="hint")

    def on_mount(self) -> None:
        self.run_pull()

    @property
    def llm(self) -> LocalLLMApp:
        return self.app  # type: ignore[return-value]

    @work(exclusive=True, group="pull")
    async def run_pull(self) -> None:
        meters: dict[str, RateMeter] = {}
        bar = self.query_one("#bar", ProgressBar)
        line = self.query_one("#line", Label)
        try:
            async for event in self.llm.client.pull(self.model):
                self._show(event, meters, bar, line)
        except LocalLLMError as exc:
            self.failed = str(exc)
            self.notify(f"Pull failed: {exc}", severity="error", timeout=8)
            self.dismiss(False)
            return
        self.notify(f"Pulled {self.model}")
        self.dismiss(True)

    def _show(self, event: dict[str, Any], meters: dict[str, RateMeter],
              bar: ProgressBar, line: Label) -> None:
        status = str(event.get("status", ""))
        if not self.status_lines or self.status_lines[-1] != status:
            self.status_lines.append(status)
        total, done = event.get("total"), event.get("completed")
        rate = None
        if total:
            meter = meters.setdefault(str(event.get("digest", "")), RateMeter())
            rate = meter.update(int(done or 0), time.monotonic())
            bar.update(total=total, progress=done or 0)
        line.update(pull_line(event, rate))

    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "pull")
        self.notify(f"Pull of {self.model} cancelled", severity="warning")
        self.dismiss(False)
