"""Will a model fit on this machine: the planner's answer turned into a verdict (pure).

``assess(info, devices, opts)`` plans the load exactly as the scheduler would
(``planner.plan`` with the daemon's settings and an automatic context) and
says where it lands: ``gpu`` (every layer on GPUs), ``partial`` (``22/29
layers on GPU``), ``cpu`` (no GPU, or none with room for a layer), or
``too_big`` (not even the smallest automatic context fits in RAM and VRAM
together), with the memory per device at the context the load would get and
the largest context that keeps as many layers on the GPUs (``max_context``).

``scaled`` stands one quant's ``ModelInfo`` in for another of the same model,
weights scaled by file size (the search reads one header per repo);
``reclaimed`` gives the devices as they would be once loaded models are
evicted, which is what a new load can count on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from localllm.api.wire import FitResult
from localllm.gguf.info import ModelInfo
from localllm.hardware.detect import Device
from localllm.scheduler.estimate import CTX_PAD, fmt_bytes
from localllm.scheduler.planner import LoadPlan, PlanOptions, plan

Status = Literal["gpu", "partial", "cpu", "too_big", "unknown"]
MAX_CONTEXT_CAP = 1 << 20  # for a model that declares no training context


@dataclass(frozen=True)
class Fit:
    status: Status
    summary: str  # "all 29 layers on GPU", "22/29 layers on GPU", "CPU only", "too big"
    layers_on_gpu: int = 0
    layers: int = 0  # repeating layers + the output layer, as llama.cpp counts them
    memory: dict[str, int] = field(default_factory=dict)  # device -> bytes ("CPU" = RAM)
    context: int = 0  # the context the load would get
    max_context: int = 0  # the largest that keeps as many layers on GPUs (0: none fits)
    reason: str = ""  # the planner's one line

    @property
    def total(self) -> int:
        return sum(self.memory.values())

    def to_json(self) -> FitResult:
        return {
            "status": self.status,
            "summary": self.summary,
            "layers_on_gpu": self.layers_on_gpu,
            "layers": self.layers,
            "memory": dict(self.memory),
            "context": self.context,
            "max_context": self.max_context,
            "reason": self.reason,
        }


def unknown(why: str) -> Fit:
    return Fit("unknown", "unknown", reason=why)


def _memory(p: LoadPlan) -> dict[str, int]:
    out = {g.name: g.total for g in p.gpus if g.total}
    if p.cpu.total:
        out["CPU"] = p.cpu.total
    return out


def _verdict(p: LoadPlan) -> tuple[Status, str]:
    if not p.fits:
        return "too_big", "too big"
    if p.gpus and p.fully_offloaded:
        return "gpu", f"all {p.n_layers} layers on GPU"
    if p.n_gpu_layers > 0:
        return "partial", f"{p.n_gpu_layers}/{p.n_layers} layers on GPU"
    return "cpu", "CPU only"


def assess(
    info: ModelInfo, devices: Sequence[Device], opts: PlanOptions, *, find_max_context: bool = True
) -> Fit:
    """The verdict for loading ``info`` on ``devices`` with ``opts`` (see the module doc)."""
    base = plan(info, devices, opts)
    status, summary = _verdict(base)
    top = _max_context(info, devices, opts, base) if base.fits and find_max_context else 0
    return Fit(
        status,
        summary,
        base.n_gpu_layers,
        base.n_layers,
        _memory(base),
        base.n_ctx,
        top,
        base.reason,
    )


def _max_context(
    info: ModelInfo, devices: Sequence[Device], opts: PlanOptions, base: LoadPlan
) -> int:
    """The largest context (up to the training context; else a multiple of 256) at which
    the plan still fits with at least ``base``'s layers on GPUs: bisection on the planner,
    whose memory only grows with the context."""

    def ok(ctx: int) -> bool:
        p = plan(info, devices, replace(opts, num_ctx=ctx))
        return p.fits and p.n_gpu_layers >= base.n_gpu_layers

    limit = info.context_length if info.context_length > 0 else MAX_CONTEXT_CAP
    if limit <= base.n_ctx:
        return base.n_ctx
    if ok(limit):
        return limit
    lo, hi = base.n_ctx // CTX_PAD, -(-limit // CTX_PAD)  # ok(lo), not ok(hi), in 256s
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid * CTX_PAD):
            lo = mid
        else:
            hi = mid
    return max(lo * CTX_PAD, base.n_ctx)


def describe(fit: Fit) -> str:
    """One line for people: ``all 29 layers on GPU, 5.1 GiB at 8192 tokens``."""
    if fit.status == "unknown":
        return f"unknown ({fit.reason})" if fit.reason else "unknown"
    if fit.status == "too_big":
        return f"too big: {fit.reason.split('does not fit: ', 1)[-1]}"
    return f"{fit.summary}, {fmt_bytes(fit.total)} at {fit.context} tokens"


def scaled(info: ModelInfo, file_size: int, data_bytes: int) -> ModelInfo:
    """``info`` (a model's header, ``data_bytes`` of tensors) as another quant of the same
    model stored in ``file_size`` bytes: every weight scaled by the ratio of tensor data.

    Quants differ in the type mix per tensor (Q4_K_M keeps some in Q6_K), so this is
    an estimate within a few percent; the shape (KV cache, graph) is exact.
    """
    overhead = max(info.file_size - data_bytes, 0)
    k = max(file_size - overhead, 0) / data_bytes if data_bytes > 0 else 1.0

    def s(n: int) -> int:
        return int(n * k)

    return replace(
        info,
        layer_bytes=[s(b) for b in info.layer_bytes],
        expert_bytes=[s(b) for b in info.expert_bytes],
        output_bytes=s(info.output_bytes),
        token_embd_bytes=s(info.token_embd_bytes),
        other_bytes=s(info.other_bytes),
        file_size=file_size,
    )


def reclaimed(devices: Iterable[Device], loaded: Iterable[LoadPlan]) -> list[Device]:
    """``devices`` with the memory that ``loaded`` models hold counted as free again
    (the scheduler evicts idle models to make room), never above a device's total."""
    held: dict[str, int] = {}
    for p in loaded:
        for u in p.gpus:
            held[u.name] = held.get(u.name, 0) + u.total
        held["CPU"] = held.get("CPU", 0) + p.host_bytes
    out = []
    for d in devices:
        key = "CPU" if d.kind == "cpu" else d.name
        free = d.free + held.get(key, 0)
        out.append(replace(d, free=min(free, d.total) if d.total > 0 else free))
    return out
