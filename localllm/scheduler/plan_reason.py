"""The one-line reason a ``LoadPlan`` gives for its placement (pure text).

``planner.plan`` fills ``LoadPlan.reason`` with it: where the layers went and
why, what the KV cache and weights need next to the free memory, and what did
not fit.  The scheduler logs it with each load; the CLI quotes it when a model
will not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from localllm.hardware.detect import Device
from localllm.scheduler.estimate import fmt_bytes
from localllm.scheduler.plan_types import LoadPlan, PlanOptions


def plan_reason(p: LoadPlan, gpus: Sequence[Device], opts: PlanOptions, avail: int) -> str:
    """Why ``p`` places the model as it does; ``gpus``: the usable GPUs, ``avail``: RAM."""
    names = ", ".join(g.name for g in p.gpus)
    split = ""
    if len(p.gpus) > 1:
        split = "split " + "/".join(str(n) for n in p.tensor_split) + " by free memory; "
    if not p.gpus:
        why = (
            "num_gpu=0"
            if opts.num_gpu == 0 and gpus
            else "no GPU the engine can use"
            if not gpus
            else f"no GPU has room for a layer ({gpus[0].name}: {fmt_bytes(gpus[0].free)} free)"
        )
        text = f"CPU only: {why}"
        if p.fits and avail:
            text += f" ({fmt_bytes(p.ram)} of RAM)"
    elif p.fully_offloaded:
        free = sum(g.free for g in p.gpus)
        text = (
            f"all {p.n_layers} layers on {names} "
            f"({split}{fmt_bytes(p.vram)} of {fmt_bytes(free)} free)"
        )
    else:
        weights = p.cpu.weights + sum(g.weights for g in p.gpus)
        text = (
            f"{p.n_gpu_layers}/{p.n_layers} layers on {names}, rest on CPU: {split}"
            f"KV cache for {p.n_ctx * p.n_parallel} tokens needs {fmt_bytes(p.kv_bytes)}, "
            f"weights {fmt_bytes(weights)}, {fmt_bytes(sum(g.free for g in p.gpus))} free"
        )
    if p.n_cpu_moe:
        text = f"experts of {p.n_cpu_moe}/{p.n_layers - 1} layers in RAM (MoE), {text}"
    if p.remote_bytes:
        text += f"; {fmt_bytes(p.remote_bytes)} on remote (RPC) devices"
    if opts.spread and len(p.gpus) > 1:
        text = f"spread over {len(p.gpus)} GPUs (LOCALLLM_SCHED_SPREAD): {text}"
    if opts.num_gpu > 0 and p.gpus:
        text = f"num_gpu={opts.num_gpu}: {text}"
    if p.notes:
        text += "; does not fit: " + "; ".join(p.notes)
    if p.ctx_reduced:
        text += f"; context reduced to {p.n_ctx} to fit"
    return text
