"""Where each loaded model would go if it loaded again now, for ``ps`` after a re-probe.

A plugin installed while models run, or a worker come up, changes the devices the
daemon plans with (``server/reprobe.py``), but loaded models stay where they are
until they load again.  ``survey`` plans each loaded model again as the daemon's
scheduler would (``placement.make_plan_fn``) on the fresh hardware, with the
model's own memory counted as free (a reload unloads it first) and the RPC
workers it holds counted as ready (to everyone else they answer "busy"), and
remembers those whose GPUs or GPU layers would differ.  The note lives as long as
the ``Loaded`` it is about: a reload is a new one, placed on the new devices.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from functools import partial
from weakref import WeakKeyDictionary

from localllm.errors import LocalLLMError
from localllm.hardware.detect import Hardware
from localllm.scheduler.placement import make_plan_fn
from localllm.scheduler.plan_types import LoadPlan
from localllm.scheduler.scheduler import Loaded

log = logging.getLogger("localllm.scheduler")


@dataclass(frozen=True)
class Move:
    """The next placement of a loaded model that differs from its current one."""

    devices: dict[str, int]  # layers per GPU (ggml's device names); {} = the CPU alone
    reason: str  # the planner's


_moves: WeakKeyDictionary[Loaded, Move] = WeakKeyDictionary()
_lock = threading.Lock()


def gpu_layers(plan: LoadPlan | None) -> dict[str, int]:
    """Layers per GPU of ``plan`` (the GPUs that hold none left out)."""
    return {g.name: g.layers for g in plan.gpus if g.layers} if plan else {}


def as_if_unloaded(hw: Hardware, model: Loaded) -> Hardware:
    """``hw`` with ``model``'s own memory free again and the workers it holds ready."""
    plan = model.placement.plan
    own: dict[str, int] = {}
    if plan is not None:
        for g in plan.gpus:
            own[g.name] = own.get(g.name, 0) + g.total
        own[plan.cpu.name] = own.get(plan.cpu.name, 0) + plan.host_bytes
    held = set(model.opts.rpc_workers)
    return replace(
        hw,
        devices=tuple(
            replace(d, free=min(d.total, d.free + own.get(d.name, 0))) for d in hw.devices
        ),
        workers=tuple(
            replace(w, state="ready") if w.endpoint in held and w.state == "busy" else w
            for w in hw.workers
        ),
    )


def _differs(now: dict[str, int], then: dict[str, int]) -> bool:
    # Other GPUs, or more or fewer layers on them: a free-memory figure that moved by a
    # few MiB shifts a layer between two GPUs, which is no news.
    return set(now) != set(then) or sum(now.values()) != sum(then.values())


def survey(loaded: list[Loaded], hw: Hardware) -> dict[str, Move]:
    """Plan every loaded model again on ``hw``; the moves by model name (also kept for
    ``move_of``).  A model the planner cannot place now keeps no note."""
    found: dict[str, Move] = {}
    for model in loaded:
        if model.spec.info is None or model.placement.plan is None:
            continue  # placed by a stand-in planner: nothing to compare with
        others = [o for o in loaded if o is not model]
        plan_fn = make_plan_fn(partial(as_if_unloaded, hw, model))
        try:
            nxt = plan_fn(model.spec, model.requested, others)
        except (LocalLLMError, ValueError) as exc:
            log.info("%s: no placement to compare with (%s)", model.spec.name, exc)
            continue
        now, then = gpu_layers(model.placement.plan), gpu_layers(nxt.plan)
        with _lock:
            if _differs(now, then):
                _moves[model] = found[model.spec.name] = Move(then, nxt.reason)
            else:
                _moves.pop(model, None)
    return found


def move_of(model: Loaded) -> Move | None:
    """The note ``survey`` left on ``model``, if its next placement differs."""
    with _lock:
        return _moves.get(model)
