"""How the numbers the daemon reports read for people: sizes, durations, ages, placement.

The one home of these formatters (and of the one reader of RFC 3339 times),
imported by ``cli/`` and ``tui/`` so neither imports the other for them, and by
the planner's reasons and ``compat/``, so a size or a time reads one way
everywhere.  Pure functions, standard library only, so commands that print a
table start fast.
"""

from __future__ import annotations

import time


def format_bytes(n: float, *, binary: bool = False) -> str:
    """A size for people, the one rule for every size we print.

    Decimal units as Ollama prints them: ``512 B``, ``4.7 GB``, ``274 MB`` (a decimal
    below 10).  ``binary``: powers of 1024 for memory and files, as the planner and
    ``run`` report them: ``812 B``, ``12.3 KiB``, ``456 MiB``, ``5.1 GiB`` (a decimal
    below 100, so that a GPU's ``30.2 GiB`` keeps its tenth)."""
    base, units, keep = (
        (1024, ("B", "KiB", "MiB", "GiB", "TiB"), 100)
        if binary
        else (1000, ("B", "KB", "MB", "GB", "TB"), 10)
    )
    value = float(n)
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}" if abs(value) < keep else f"{value:.0f} {unit}"
        value /= base
    raise AssertionError("unreachable")


def format_count(n: int) -> str:
    """A count for people (downloads, likes): ``1234567`` -> ``1.2M``, ``5400`` -> ``5.4K``."""
    for size, unit in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "K")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(max(n, 0))


def format_file_size(n: int) -> str:
    """A file's size as ``run`` reports an attached image: ``812 B``, ``12.3 KiB``."""
    return format_bytes(n, binary=True)


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


# (below this many seconds, count in units of this many seconds, named): one table for
# the past (``list``'s MODIFIED) and the future (``ps``'s UNTIL), as Ollama's HumanTime.
_SPANS = (
    (60, 1, "second"),
    (3600, 60, "minute"),
    (86400, 3600, "hour"),
    (7 * 86400, 86400, "day"),
    (30 * 86400, 7 * 86400, "week"),
    (365 * 86400, 30 * 86400, "month"),
)


def _span(seconds: float) -> str:
    """``less than a second``, ``about a minute``, ``3 days``: a positive span, roughly."""
    if seconds < 1:
        return "less than a second"
    n, unit = int(seconds // (365 * 86400)), "year"
    for limit, size, name in _SPANS:
        if seconds < limit:
            n, unit = int(seconds // size), name
            break
    if n == 1:
        return f"about {'an' if unit == 'hour' else 'a'} {unit}"
    return f"{n} {unit}s"


def time_ago(then: float, now: float | None = None) -> str:
    """``Less than a second ago``, ``About a minute ago``, ``3 days ago``..."""
    delta = (time.time() if now is None else now) - then
    if delta < 0:
        return "In the future"
    text = _span(delta)
    return f"{text[0].upper()}{text[1:]} ago"


def time_until(then: float, now: float | None = None) -> str:
    """``4 minutes from now``, ``about an hour from now``; ``""`` once ``then`` is past."""
    delta = then - (time.time() if now is None else now)
    return f"{_span(delta)} from now" if delta > 0 else ""


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch from RFC 3339 text (``modified_at``; 0 when unreadable).

    The one reader of these times: Go's nanoseconds are cut to microseconds by the
    parser itself (Python 3.11), and a ``Z`` reads as UTC."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0
