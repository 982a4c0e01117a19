"""How the numbers the daemon reports read for people: sizes, durations, ages, placement.

The one home of these formatters, imported by both ``cli/`` and ``tui/`` so
neither imports the other for them.  Pure functions, standard library only,
so commands that print a table start fast.
"""

from __future__ import annotations

import time


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


def format_file_size(n: int) -> str:
    """A file's size in binary units, as ``run`` reports an attached image: ``812 B``,
    ``12.3 KiB``, ``4.0 MiB``."""
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


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
        (60, 1, "second"),
        (3600, 60, "minute"),
        (86400, 3600, "hour"),
        (7 * 86400, 86400, "day"),
        (30 * 86400, 7 * 86400, "week"),
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
