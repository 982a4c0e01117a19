"""Terminal output shared by CLI commands: tables, byte sizes, relative times, progress bars.

Pure formatting plus one ``PullProgress`` renderer; no third-party imports,
so commands that print tables start fast.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, TextIO


def format_bytes(n: float) -> str:
    """Decimal units as Ollama prints them: ``512 B``, ``4.7 GB``, ``274 MB``."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}" if abs(value) < 10 else f"{value:.0f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """Short ETA: ``45s``, ``3m12s``, ``1h5m``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s"
    return f"{s // 3600}h{(s % 3600) // 60}m"


def processor(size: int, size_vram: int, devices: dict[str, int] | None = None) -> str:
    """Where a loaded model lives, from /api/ps: ``100% CPU``, ``100% GPU``, ``48%/52% CPU/GPU``.

    With RPC workers among ``devices`` (place -> bytes) every place is named:
    ``60% gpu-box:50052, 40% CPU``.
    """
    if devices and any(":" in k for k in devices) and sum(devices.values()) > 0:
        total = sum(devices.values())
        parts = sorted(devices.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{round(v / total * 100)}% {k}" for k, v in parts if v > 0)
    if size <= 0:
        return "Unknown"
    if size_vram <= 0:
        return "100% CPU"
    if size_vram >= size:
        return "100% GPU"
    cpu = round((size - size_vram) / size * 100)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def time_ago(then: float, now: float | None = None) -> str:
    """``Less than a second ago``, ``About a minute ago``, ``3 days ago``..."""
    delta = (time.time() if now is None else now) - then
    if delta < 0:
        return "In the future"
    if delta < 1:
        return "Less than a second ago"
    steps = (
        (60, 1, "second"), (3600, 60, "minute"), (86400, 3600, "hour"),
        (7 * 86400, 86400, "day"), (30 * 86400, 7 * 86400, "week"),
        (365 * 86400, 30 * 86400, "month"),
    )
    for limit, size, unit in steps:
        if delta < limit:
            n = int(delta // size)
            if n == 1:
                article = "an" if unit == "hour" else "a"
                return f"About {article} {unit} ago"
            return f"{_plural(n, unit)} ago"
    years = int(delta // (365 * 86400))
    return "About a year ago" if years == 1 else f"{years} years ago"


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch from an RFC 3339 ``modified_at`` (0 when unreadable)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], gap: int = 4) -> str:
    """Left-aligned columns separated by ``gap`` spaces, no borders."""
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
    """

    def __init__(self, out: TextIO | None = None, *, interactive: bool | None = None) -> None:
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty() if interactive is None else interactive
        self.keys: list[str] = []
        self.lines: dict[str, str] = {}
        self.rates: dict[str, _Rate] = {}
        self.started = time.monotonic()
        self.drawn = 0
        self.last_draw = 0.0
        self.printed: set[str] = set()

    def update(self, event: dict[str, Any]) -> None:
        status = str(event.get("status", ""))
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
