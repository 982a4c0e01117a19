"""Terminal output shared by CLI commands: tables and progress bars.

Plain text plus one ``PullProgress`` renderer; no third-party imports, so
commands that print tables start fast.  Sizes, durations and ages come from
``localllm.format``, which the TUI shares.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from localllm.cli.termsafe import clean
from localllm.format import format_bytes, format_duration

BLOB_PROGRESS_MIN = 1 << 20  # bytes: the store's smaller blobs get no progress bar


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], gap: int = 4) -> str:
    """Left-aligned columns separated by ``gap`` spaces, no borders.

    Cells are plain text: names and details from the daemon, the Hub or a
    catalogue lose any terminal control sequences (cli/termsafe.py)."""
    rows = [[clean(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
    lines = []
    for row in (headers, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append((" " * gap).join(cells).rstrip())
    return "\n".join(lines)


def bar(fraction: float, width: int = 25) -> str:
    fraction = min(1.0, max(0.0, fraction))
    filled = int(fraction * width)
    return "▕" + "█" * filled + " " * (width - filled) + "▏"


class _Rate:
    """Bytes per second over the last few seconds (a sliding window of samples)."""

    def __init__(self, window: float = 5.0) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, completed: int) -> float:
        self.samples.append((now, completed))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        t0, c0 = self.samples[0]
        return (completed - c0) / (now - t0) if now > t0 else 0.0


class PullProgress:
    """Renders a pull's NDJSON events: one bar per layer, one line per status.

    On a terminal every line is redrawn in place (cursor up + clear) at most
    ten times a second; otherwise each line is printed once, when it is done.
    ``min_total``: events for fewer bytes than this are not shown at all (the store's
    own copies and checks, where a bar per small blob would only be noise).
    """

    def __init__(
        self, out: TextIO | None = None, *, interactive: bool | None = None, min_total: int = 0
    ) -> None:
        self.out = out if out is not None else sys.stderr
        self.min_total = min_total
        self.tty = self.out.isatty() if interactive is None else interactive
        self.keys: list[str] = []
        self.lines: dict[str, str] = {}
        self.rates: dict[str, _Rate] = {}
        self.started = time.monotonic()
        self.drawn = 0
        self.last_draw = 0.0
        self.printed: set[str] = set()

    def update(self, event: Mapping[str, Any]) -> None:
        if self.min_total and not (event.get("total") or 0) >= self.min_total:
            return
        status = clean(str(event.get("status", "")))  # may name Hub files, quote Hub errors
        digest = event.get("digest")
        total = event.get("total")
        key = str(digest) if digest else status
        if key not in self.lines:
            self.keys.append(key)
        if digest and isinstance(total, int) and total > 0:
            completed = int(event.get("completed") or 0)
            self.lines[key] = self._bar_line(key, status, completed, total)
            done = completed >= total
        else:
            self.lines[key] = status
            done = True
        if self.tty:
            self._redraw(force=done)
        elif done and key not in self.printed:
            # Earlier lines are final once a later one starts.
            self.printed.add(key)
            print(self.lines[key], file=self.out, flush=True)

    def _bar_line(self, key: str, status: str, completed: int, total: int) -> str:
        now = time.monotonic()
        rate = self.rates.setdefault(key, _Rate()).add(now, completed)
        pct = 100 * completed // total
        text = f"{status}: {pct:3d}% {bar(completed / total)} {format_bytes(completed)}/"
        text += format_bytes(total)
        if completed < total and rate > 0:
            text += f"  {format_bytes(rate)}/s  {format_duration((total - completed) / rate)}"
        return text

    def _redraw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_draw < 0.1:
            return
        self.last_draw = now
        parts = []
        if self.drawn:
            parts.append(f"\x1b[{self.drawn}F")  # back to the first line we drew
        for key in self.keys:
            parts.append("\x1b[2K" + self.lines[key] + "\n")
        self.out.write("".join(parts))
        self.out.flush()
        self.drawn = len(self.keys)

    def finish(self) -> None:
        if self.tty:
            self._redraw(force=True)
