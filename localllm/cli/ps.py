"""``localllm ps``: the loaded models as a table NAME, ID, SIZE, PROCESSOR, CONTEXT, SLOTS, UNTIL.

SLOTS (not in Ollama's table) is how many requests the model serves at once.  Below the
table, a line for each model a reload would place elsewhere (devices added since it loaded:
a plugin installed, a worker come up), with how to get there.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from localllm.format import processor, time_until

if TYPE_CHECKING:
    from localllm.api.wire import WouldMove

# expires_at beyond this many seconds means "kept forever" (keep_alive < 0).
_FOREVER_AFTER = 100 * 365 * 86400


def register(sub: Any) -> None:
    parser = sub.add_parser("ps", help="List running models")
    parser.set_defaults(func=run)


def until(expires_at: float, now: float | None = None) -> str:
    """``4 minutes from now``, ``Forever`` (kept loaded), or ``Stopping...`` once expired."""
    now = time.time() if now is None else now
    delta = expires_at - now
    if delta <= 0:
        return "Stopping..."
    if delta > _FOREVER_AFTER:
        return "Forever"
    return time_until(expires_at, now)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.cli.output import table
    from localllm.format import format_bytes, parse_timestamp

    with Client(autostart=True) as client:
        models = client.ps()
    rows = []
    for m in models:
        size, vram = int(m.get("size") or 0), int(m.get("size_vram") or 0)
        expires = parse_timestamp(str(m.get("expires_at", "")))
        rows.append(
            (
                str(m.get("name", "")),
                str(m.get("digest", "")).removeprefix("sha256:")[:12],
                format_bytes(size),
                processor(size, vram, m.get("devices")),
                str(m.get("context_length") or ""),
                str(m.get("num_parallel") or ""),
                until(expires) if expires else "",
            )
        )
    print(table(["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "SLOTS", "UNTIL"], rows))
    for m in models:
        if "would_move" in m:
            print(move_line(m["name"], m["would_move"]))
    return 0


def move_line(name: str, move: WouldMove) -> str:
    """``tiny would move to GPU CUDA0 (29 layers) on a reload: ...``."""
    where = (
        "GPU " + ", ".join(f"{dev} ({n} layers)" for dev, n in move["devices"].items())
        if move["devices"]
        else "the CPU"
    )
    return (
        f"{name} would move to {where} on a reload: 'localllm stop {name}', and the next "
        "request loads it there."
    )
