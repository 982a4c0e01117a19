"""Connect the pure planner to the scheduler: a ``PlanFn`` over the detected hardware.

The scheduler asks "how would this model load next to these?"; this module
answers with the planner's ``LoadPlan`` turned into concrete ``LoadOptions``
(context length, GPU layers, KV type) and a ``fits`` verdict that drives
eviction.  Hardware comes from ``hardware.detect`` (a probe subprocess, cached),
so the daemon still never imports the native module; free memory is re-read
before each placement because loaded models change it.
"""

from __future__ import annotations

from collections.abc import Callable

from localllm.engine.types import LoadOptions
from localllm.hardware.detect import Hardware, refresh_memory
from localllm.scheduler.planner import LoadPlan, PlanOptions, fits_alongside
from localllm.scheduler.scheduler import Loaded, ModelSpec, Placement, PlanFn


def make_plan_fn(hardware: Callable[[], Hardware] = refresh_memory) -> PlanFn:
    """A ``PlanFn`` that plans on ``hardware()``'s devices."""

    def plan_fn(spec: ModelSpec, opts: LoadOptions, others: list[Loaded]) -> Placement:
        hw = hardware()
        loaded: list[LoadPlan] = [o.placement.plan for o in others
                                  if isinstance(o.placement.plan, LoadPlan)]
        fits, plan = fits_alongside(spec.info, hw.devices, PlanOptions.from_load(opts), loaded)
        return Placement(
            opts=plan.apply(opts),
            size=plan.total,
            size_vram=plan.vram,
            fits=fits,
            reason=plan.reason,
            plan=plan,
        )

    return plan_fn
