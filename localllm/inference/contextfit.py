"""Would a model load with each of several contexts here: the daemon's planner, asked ahead.

Owned here: :func:`fit_contexts`, behind ``/api/show``'s ``fit_contexts`` field
(ours, not Ollama's).  ``localllm launch`` asks it for the contexts it would give an
agent, so the judgement is the daemon's own, on the daemon's machine, with its
store and settings: the CLI only speaks HTTP.  Each context is planned as the
scheduler would plan that load (``scheduler.placement``), with the model's own
parameters, the context and the slots asked for, and the memory of the models the
daemon holds counted as free, since the scheduler evicts them to make room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from localllm.api.wire import ContextFit
from localllm.hardware.detect import refresh_memory
from localllm.inference.options import resolve_options
from localllm.inference.service import InferenceService, base_load
from localllm.scheduler.fit import reclaimed
from localllm.scheduler.placement import make_plan_fn

MAX_CONTEXTS = 16  # one request plans at most this many contexts


def fit_contexts(
    svc: InferenceService, model: str, contexts: Sequence[int], num_parallel: int | None
) -> list[ContextFit]:
    """The verdict for loading ``model`` with each of ``contexts`` (see the module doc)."""
    target = svc.target(model)
    hw = refresh_memory()
    held = [m.placement.plan for m in svc.scheduler.loaded() if m.placement.plan is not None]
    hw = replace(hw, devices=tuple(reclaimed(hw.devices, held)))
    has_gpu = any(d.is_gpu for d in hw.devices)
    plan_fn = make_plan_fn(lambda: hw)
    has_draft = target.spec.draft is not None
    out: list[ContextFit] = []
    for context in contexts:
        params = {**target.params, "num_ctx": context}
        if num_parallel is not None:
            params["num_parallel"] = num_parallel
        load = base_load(resolve_options(params, None, has_draft=has_draft))
        load = replace(load, projector=target.spec.projector, draft=target.spec.draft)
        placement = plan_fn(target.spec, load, [])
        plan = placement.plan
        out.append(
            {
                "context": context,
                "fits": placement.fits,
                # Every layer on the GPUs, or there are none to use.
                "on_gpu": not has_gpu or bool(plan is not None and plan.fully_offloaded),
                "reason": placement.reason,
            }
        )
    return out
