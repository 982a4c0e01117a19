"""``/api/ps`` entries: a loaded model's size, placement and expiry as Ollama shows them.

Sizes are what the runner holds, measured after the load: llama.cpp's buffers
per device with the host compute reserve counted as far as it is resident
(``runner.resident``); the planner's estimate only while no runner reported.
``devices`` adds where the bytes are, ``num_parallel`` the model's slots, and
``would_move`` where a reload would put a model whose devices changed since it
loaded (``scheduler/moves.py``).
"""

from __future__ import annotations

import math
import re
import time

from localllm.api.wire import PsEntry
from localllm.models.details import rfc3339
from localllm.runner.resident import is_host
from localllm.scheduler.moves import move_of
from localllm.scheduler.scheduler import Loaded


def utc_rfc3339(timestamp: float) -> str:
    return rfc3339(timestamp, utc=True)


def ps_entry(model: Loaded) -> PsEntry:
    placement = model.placement
    expires = model.expires_at
    if math.isinf(expires) and model.refcount == 0:
        expires_text = "2318-01-01T00:00:00Z"  # kept forever (keep_alive < 0)
    elif math.isinf(expires):
        # In use: the timer starts when the last request ends.
        expires_text = utc_rfc3339(
            time.time() + model.keep_alive if math.isfinite(model.keep_alive) else 1e10
        )
    else:
        expires_text = utc_rfc3339(expires)
    memory = model.runner.memory or {}
    measured = sum(sum(v.values()) for v in memory.values())
    measured_vram = sum(sum(v.values()) for k, v in memory.items() if not is_host(k))
    size = measured or placement.size
    size_vram = measured_vram if measured else placement.size_vram
    entry: PsEntry = {
        "name": model.spec.name,
        "model": model.spec.name,
        "size": size,
        "size_vram": size_vram,
        "digest": model.spec.digest.removeprefix("sha256:"),
        "details": model.spec.details,
        "expires_at": expires_text,
        "context_length": model.opts.n_ctx,
        # Not in Ollama's reply (clients ignore unknown fields): requests the model
        # serves at once, each with context_length tokens of its own.
        "num_parallel": max(1, model.opts.n_parallel),
        # Not in Ollama's reply: bytes per place (a GPU, "CPU", or an RPC worker's
        # endpoint), so ps can say "60% gpu-box:50052, 40% CPU" for split models.
        "devices": _by_place(memory),
    }
    move = move_of(model)
    if move is not None:
        entry["would_move"] = {
            "devices": {_place(dev): n for dev, n in move.devices.items()},
            "reason": move.reason,
        }
    return entry


def _by_place(memory: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for dev, parts in memory.items():
        place = _place(dev)
        out[place] = out.get(place, 0) + sum(parts.values())
    return out


def _place(dev: str) -> str:
    """An RPC device by its worker's endpoint, host buffers as "CPU", a GPU by its name."""
    m = re.fullmatch(r"RPC\d*\[(.+)\]", dev)
    return m.group(1) if m else "CPU" if is_host(dev) else dev
