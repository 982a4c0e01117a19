"""Pulling a model with a live progress bar (bytes, speed, ETA); Escape cancels.

Cancelling closes the pull stream, which makes the daemon stop the download
(a later pull resumes from the partial file).  The pull is sent with
``force: false``, as ``localllm pull`` does: a model too big for the daemon's
machine is refused before any byte is downloaded, and the dialog shows why
and offers ``f`` to pull it anyway.  Any other failure stays in the dialog
too, with ``r`` to try again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, ProgressBar

from localllm.errors import LocalLLMError
from localllm.tui.format import pull_line
from localllm.tui.host import host_client
from localllm.tui.search_format import refusal

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient

RUNNING_HINT = "Escape: cancel"
REFUSED_HINT = "f: pull it anyway · Escape: close"
FAILED_HINT = "r: try again · Escape: close"


class RateMeter:
    """Bytes per second, smoothed so the ETA does not jump with every chunk."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.smoothing = smoothing
        self.last: tuple[float, int] | None = None
        self.rate: float | None = None

    def update(self, completed: int, now: float) -> float | None:
        if self.last is not None and now > self.last[0] and completed >= self.last[1]:
            sample = (completed - self.last[1]) / (now - self.last[0])
            self.rate = (
                sample
                if self.rate is None
                else (self.smoothing * sample + (1 - self.smoothing) * self.rate)
            )
        if self.last is None or completed < self.last[1] or now - self.last[0] >= 0.2:
            self.last = (now, completed)
        return self.rate


class PullScreen(ModalScreen[bool]):
    """Dismissed with True when the pull finished, False when cancelled or given up.

    ``failed`` holds the last error's text, ``refused`` the reason when the daemon
    refused the model for its size (then ``f`` pulls with ``force: true``).
    ``client`` is the daemon's; without one (a pull pushed on its own) the app's.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel pull"),
        Binding("f", "force", "Pull anyway"),
        Binding("r", "retry", "Try again"),
    ]

    def __init__(self, model: str, client: AsyncClient | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.model = model
        self._client = client
        self.failed: str | None = None
        self.refused: str | None = None
        self.forced = False
        self.status_lines: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog pull"):
            yield Label(Text(f"Pulling {self.model}"), classes="question", id="title")
            yield ProgressBar(total=None, show_eta=False, id="bar")
            yield Label("starting…", id="line")
            yield Label(RUNNING_HINT, classes="hint", id="hint")

    def on_mount(self) -> None:
        self.run_pull()

    @property
    def client(self) -> AsyncClient:
        return self._client or host_client(self.app)

    @property
    def running(self) -> bool:
        return self.failed is None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # f only after a refusal, r only after another failure: the footer and the
        # keys offer what can be done now.
        if action == "force":
            return self.refused is not None
        if action == "retry":
            return self.failed is not None and self.refused is None
        return True

    @work(exclusive=True, group="pull")
    async def run_pull(self) -> None:
        meters: dict[str, RateMeter] = {}
        bar = self.query_one("#bar", ProgressBar)
        line = self.query_one("#line", Label)
        try:
            # force=False: refused before downloading when it cannot fit; True once the
            # user said to pull anyway (the daemon then warns in the progress).
            async for event in self.client.pull(self.model, force=self.forced):
                self._show(event, meters, bar, line)
        except LocalLLMError as exc:
            self._failed(str(exc))
            return
        self.notify(f"Pulled {self.model}")
        self.dismiss(True)

    def _show(
        self, event: Mapping[str, Any], meters: dict[str, RateMeter], bar: ProgressBar, line: Label
    ) -> None:
        status = str(event.get("status", ""))
        if not self.status_lines or self.status_lines[-1] != status:
            self.status_lines.append(status)
        total, done = event.get("total"), event.get("completed")
        rate = None
        if total:
            meter = meters.setdefault(str(event.get("digest", "")), RateMeter())
            rate = meter.update(int(done or 0), time.monotonic())
            bar.update(total=total, progress=done or 0)
        # Text, not markup: file names come from the Hub.
        line.update(Text(pull_line(event, rate)))

    def _failed(self, message: str) -> None:
        """Show the error in place, with what can be done next."""
        self.failed = message
        self.refused = refusal(message)
        self.query_one("#bar", ProgressBar).display = False
        title = (
            "Not pulled: too big for this machine"
            if self.refused is not None
            else f"Pull of {self.model} failed"
        )
        self.query_one("#title", Label).update(Text(title))
        line = self.query_one("#line", Label)
        line.update(Text(self.refused or message))
        line.add_class("error")
        self.query_one("#hint", Label).update(
            REFUSED_HINT if self.refused is not None else FAILED_HINT
        )
        self.refresh_bindings()

    def _restart(self, force: bool) -> None:
        self.forced = self.forced or force
        self.failed = self.refused = None
        bar = self.query_one("#bar", ProgressBar)
        bar.display = True
        bar.update(total=None, progress=0)
        self.query_one("#title", Label).update(
            Text(f"Pulling {self.model}" + (" anyway" if self.forced else ""))
        )
        line = self.query_one("#line", Label)
        line.remove_class("error")
        line.update("starting…")
        self.query_one("#hint", Label).update(RUNNING_HINT)
        self.refresh_bindings()
        self.run_pull()

    def action_force(self) -> None:
        if self.refused is not None:
            self._restart(force=True)

    def action_retry(self) -> None:
        if self.failed is not None and self.refused is None:
            self._restart(force=False)

    def action_cancel(self) -> None:
        if self.running:
            self.workers.cancel_group(self, "pull")
            self.notify(f"Pull of {self.model} cancelled", severity="warning")
        self.dismiss(False)
