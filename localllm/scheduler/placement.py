"""Connect the pure planner to the scheduler: a ``PlanFn`` over the detected hardware.

The scheduler asks "how would this model load next to these?"; this module
answers with the planner's ``LoadPlan`` turned into concrete ``LoadOptions``
(context length, GPU layers, KV type, devices and split, the RPC workers the
runner must connect to) and a ``fits`` verdict that drives eviction.
Hardware comes from ``hardware.detect`` (a probe subprocess, cached), so the
daemon still never imports the native module; free memory is re-read before
each placement because loaded models change it.

RPC workers: a ggml RPC server serves one client at a time, so only workers
that answer "ready" now take part (one that a loaded model holds answers
"busy").  A worker that is down is named in the log, and in the error when
the model does not fit without it.

LOCALLLM_LLM_LIBRARY (or Ollama's OLLAMA_LLM_LIBRARY) keeps the planner to one
library's GPUs (``cpu``: none), as Ollama's choice of library folder does; the
CPU and the RPC workers named in LOCALLLM_RPC_WORKERS stay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from localllm import config
from localllm.errors import ModelLoadError
from localllm.gguf.info import read_model_info
from localllm.hardware.detect import Device, Hardware, refresh_memory
from localllm.hardware.rpc import endpoint_of
from localllm.runner.messages import LoadOptions
from localllm.scheduler.planner import PlanOptions, fits_alongside
from localllm.scheduler.projector import projector_cost
from localllm.scheduler.scheduler import Loaded, ModelSpec, Placement, PlanFn

log = logging.getLogger("localllm.scheduler")


def make_plan_fn(hardware: Callable[[], Hardware] = refresh_memory) -> PlanFn:
    """A ``PlanFn`` that plans on ``hardware()``'s devices."""

    def plan_fn(spec: ModelSpec, opts: LoadOptions, others: list[Loaded]) -> Placement:
        hw = hardware()
        ready = {w.endpoint for w in hw.workers if w.ready}
        down = [w for w in hw.workers if w.state in ("down", "incompatible")]
        for w in down:
            log.warning(
                "RPC worker %s is not usable (%s): planning without it", w.endpoint, w.error
            )
        devices = [
            d
            for d in library_devices(hw.devices)
            if (ep := endpoint_of(d.name)) is None or ep in ready
        ]
        loaded = [o.placement.plan for o in others if o.placement.plan is not None]
        extra: dict[str, Any] = {}
        if spec.projector:  # counted on the device the runner will load it on
            cost = projector_cost(spec.projector, opts.flash_attn != "off")
            extra = {"projector_weights": cost.weights, "projector_compute": cost.compute}
        if spec.draft:  # so is a draft model (scheduler/draft.py)
            extra["draft"] = spec.draft_info or read_model_info(spec.draft)
        assert spec.info is not None, "a spec to place carries its header (see Target)"
        fits, plan = fits_alongside(
            spec.info, devices, PlanOptions.from_load(opts, **extra), loaded
        )
        reason = plan.reason
        if down:
            reason += "; without RPC worker " + ", ".join(f"{w.endpoint} ({w.error})" for w in down)
            if not plan.fits and not others:
                raise ModelLoadError(
                    f"{spec.name} does not fit on this machine alone "
                    f"({plan.reason}), and {reason.split('; without ')[-1]}"
                )
        load = plan.apply(opts)
        workers = sorted({ep for d in load.devices if (ep := endpoint_of(d)) is not None})
        return Placement(
            opts=replace(load, rpc_workers=workers),
            size=plan.total,
            size_vram=plan.vram,
            fits=fits,
            reason=reason,
            plan=plan,
        )

    return plan_fn


def library_devices(devices: tuple[Device, ...]) -> list[Device]:
    """``devices`` less the GPUs of libraries LOCALLLM_LLM_LIBRARY leaves out."""
    library = config.LLM_LIBRARY.get()
    if not library:
        return list(devices)
    keep = config.LLM_LIBRARY_DEVICES[library]
    # ggml's "accel" devices (BLAS, AMX) compute in host memory: part of the CPU's side.
    return [
        d
        for d in devices
        if d.kind in ("cpu", "accel") or d.library in keep or endpoint_of(d.name) is not None
    ]
