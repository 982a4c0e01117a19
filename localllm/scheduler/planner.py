"""Where a model's layers go and how much context it gets: ``plan(info, devices, opts)``.

Pure functions, no I/O.  The estimate (scheduler/estimate.py) gives bytes per
layer (weights + its KV cache), the output layer and the compute graph; the
placement (scheduler/layer_fill.py) fills GPUs from the last layer down, the
output layer last, exactly as llama.cpp's ``n_gpu_layers`` counts them
(``L + 1`` means everything).  Each GPU keeps a fixed reserve (640 MiB on CUDA,
as measured, 512 MiB on Metal, else 457 MiB) plus ``LOCALLLM_GPU_OVERHEAD`` and
room for the compute graph.

Several GPU sets are compared: the fewest GPUs that hold the whole model win,
local ones before remote (RPC) devices; layers split over a set by free memory.
``LOCALLLM_SCHED_SPREAD`` uses every GPU instead.  An automatic context starts
from a VRAM tier and steps down until the model is fully offloaded (or fits in
RAM), the way llama.cpp's own fitting reduces context first; a MoE model that
still does not fit keeps the experts of its lowest layers in RAM
(``n_cpu_moe``) before whole layers go to the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from localllm.gguf.info import ModelInfo
from localllm.hardware.cpu_buffers import ExtraBuffer
from localllm.hardware.detect import Device
from localllm.scheduler.draft import DraftCost, draft_cost
from localllm.scheduler.estimate import (
    KV_BLOCKS,
    QUANTIZED_KV,
    GiB,
    MiB,
    estimate_kv_bytes,
    fmt_bytes,
    graph_bytes,
    host_graph_bytes,
    kv_cells,
    kv_layer_bytes,
)
from localllm.scheduler.layer_fill import (
    Fill,
    Layers,
    assign,
    gpu_layer_bytes,
    gpu_sets,
    shrinkable,
    smallest,
)
from localllm.scheduler.plan_reason import plan_reason
from localllm.scheduler.plan_types import DeviceUse, LoadPlan, PlanOptions
from localllm.scheduler.repack import repacked_bytes, runner_default_devices, usable_extras

__all__ = [
    "DeviceUse",
    "LoadPlan",
    "PlanOptions",
    "default_context",
    "estimate_kv_bytes",
    "fits_alongside",
    "plan",
    "subtract_loaded",
]

MIN_RESERVE = 457 * MiB  # ROCm / Vulkan context and driver allocations
MIN_RESERVE_METAL = 512 * MiB
# Measured: a runner on an H100 (CUDA 13, ggml 0.25.3) held 603 MiB beyond
# llama.cpp's buffers (context, kernels, cuBLAS, ggml's pool); rounded up for pool
# growth in long prompts.
MIN_RESERVE_CUDA = 640 * MiB
CTX_LADDER = (262144, 131072, 65536, 32768, 16384, 8192, 4096)
MIN_AUTO_CTX = 4096


def _reserve(dev: Device) -> int:
    return {"Metal": MIN_RESERVE_METAL, "CUDA": MIN_RESERVE_CUDA}.get(dev.library, MIN_RESERVE)


def usable_gpus(devices: Iterable[Device]) -> list[Device]:
    """Discrete GPUs; integrated ones only when there is no discrete GPU (as llama.cpp does)."""
    devs = list(devices)
    gpus = [d for d in devs if d.kind == "gpu"]
    return gpus or [d for d in devs if d.kind == "igpu"]


def default_context(info: ModelInfo, gpus: Sequence[Device], opts: PlanOptions) -> int:
    """The context an automatic request starts from: setting, else VRAM tier; <= training."""
    if opts.default_ctx > 0:
        ctx = opts.default_ctx
    else:
        vram = sum(max(g.total - opts.gpu_overhead, 0) for g in gpus)
        ctx = 4096 if vram < 24 * GiB else 32768 if vram < 48 * GiB else 262144
    return min(ctx, info.context_length) if info.context_length > 0 else ctx


@dataclass(frozen=True)
class _Request:
    """What stays the same while the planner tries contexts and GPU sets."""

    info: ModelInfo
    opts: PlanOptions
    kv_type: str
    fa: bool
    avail: int  # RAM available (0 = unknown)
    cpu: Device | None  # the CPU device: its extra buffer types (scheduler/repack.py)
    default_devices: tuple[Device, ...]  # what a runner passes for a plan with no GPU


def _pad(values: Sequence[int], n: int) -> list[int]:
    return list(values) + [0] * (n - len(values))


@dataclass(frozen=True)
class _Sizes:
    """What one layout places: each layer's bytes, the compute graph, each GPU's room."""

    n_rep: int  # repeating layers (the output layer is one more)
    layers: list[int]  # each layer's weights
    experts: list[int]  # each layer's expert tensors (part of its weights)
    n_par: int  # sequences (slots)
    kv_layer: int  # one layer's KV cache
    graph_full: int  # the compute graph, everything offloaded
    graph_partial: int  # the compute graph, layers left on the CPU
    frees: list[int]  # each GPU's free memory (bounded by RAM where unified)
    caps: list[int]  # what each GPU can take for layers
    draft: Callable[..., DraftCost] | None  # the draft model's cost, given where it goes


def _sizes(r: _Request, gpus: Sequence[Device], ctx: int, n_cpu_moe: int) -> _Sizes:
    info, opts = r.info, r.opts
    n_rep = max(info.n_layers, len(info.layer_bytes))
    np_ = max(opts.num_parallel, 1)
    kv_l = kv_layer_bytes(info, kv_cells(ctx, np_), r.kv_type)
    g_full, g_partial = graph_bytes(info, ctx, np_, opts.num_batch, r.fa, kv_l * info.n_layers)
    if len(gpus) > 1:
        g_full = g_partial
    if any(g.library == "Metal" for g in gpus):
        g_partial = g_full
    eb = _pad(info.expert_bytes, n_rep)
    fixed_ram = (
        info.token_embd_bytes
        + info.other_bytes
        + host_graph_bytes(info, opts.num_batch)
        + sum(eb[:n_cpu_moe])
    )
    # A unified-memory GPU's memory is the same RAM the CPU side uses.
    frees = [
        min(g.free, r.avail - fixed_ram) if g.unified_memory and r.avail > 0 else g.free
        for g in gpus
    ]
    draft = (
        partial(
            draft_cost,
            opts.draft,
            ctx,
            np_,
            opts.num_batch,
            r.kv_type,
            r.fa,
            use_mmap=opts.use_mmap,
        )
        if opts.draft is not None
        else None
    )
    caps = _caps(r, gpus, frees, max(g_full, g_partial), draft)
    lb = _pad(info.layer_bytes, n_rep)
    return _Sizes(n_rep, lb, eb, np_, kv_l, g_full, g_partial, frees, caps, draft)


def _caps(
    r: _Request,
    gpus: Sequence[Device],
    frees: Sequence[int],
    reserve_graph: int,
    draft: Callable[..., DraftCost] | None,
) -> list[int]:
    """What each GPU can take for layers: its free memory less the overhead setting, its
    reserve and the compute graph; llama.cpp's first device (filled last) also holds the
    projector and the draft model."""
    opts = r.opts
    caps = [
        f - opts.gpu_overhead - _reserve(g) - reserve_graph
        for g, f in zip(gpus, frees, strict=True)
    ]
    proj = opts.projector_weights + opts.projector_compute
    if caps and proj:
        caps[-1] -= proj
    if caps and draft is not None:
        caps[-1] -= draft(on_gpu=True, extras=()).gpu_total
    return caps


def _layout(r: _Request, gpus: Sequence[Device], ctx: int, n_cpu_moe: int = 0) -> LoadPlan:
    """Place layers for one context on ``gpus`` (fill order: the first takes the top layers).

    With ``n_cpu_moe`` the expert tensors of the lowest layers stay in RAM, so
    those layers cost only their other weights and KV cache on a GPU.
    """
    info, opts = r.info, r.opts
    s = _sizes(r, gpus, ctx, n_cpu_moe)
    target = s.n_rep + 1 if opts.num_gpu < 0 else min(opts.num_gpu, s.n_rep + 1)
    layers = Layers(
        gpu_layer_bytes(s.layers, s.experts, n_cpu_moe), s.kv_layer, target, info.output_bytes
    )
    fills, placed = assign(s.caps, layers, opts.num_gpu >= 0, shrinkable(gpus, opts.spread))
    gpu_uses = _gpu_uses(r, gpus, s, fills, full=placed > s.n_rep)
    # The CPU backend's repacked copies of what it keeps (AMX, CPU_REPACK...); a GPU with
    # a host buffer among the model's devices rules them out (scheduler/repack.py).
    on_gpus = [g for g, f in zip(gpus, fills, strict=True) if f.layers]
    cpu_extras = usable_extras(r.cpu, on_gpus or r.default_devices, opts.cpu_repack)
    cpu = _cpu_use(r, s, placed, n_cpu_moe, cpu_extras, offloaded=bool(gpu_uses))
    if s.draft is not None:
        draft = s.draft(on_gpu=bool(gpu_uses), extras=cpu_extras)
        cpu = draft.onto(cpu)
        gpu_uses = (draft.onto(gpu_uses[0]), *gpu_uses[1:]) if gpu_uses else gpu_uses
    notes = _notes(gpus, fills, s.caps, cpu, gpu_uses, r.avail)
    return LoadPlan(
        placed,
        s.n_rep + 1,
        ctx,
        s.n_par,
        opts.num_batch,
        r.kv_type,
        r.fa,
        gpu_uses,
        cpu,
        fits=not notes,
        reason="",
        notes=tuple(notes),
        n_cpu_moe=n_cpu_moe,
    )


def _gpu_uses(
    r: _Request, gpus: Sequence[Device], s: _Sizes, fills: Sequence[Fill], *, full: bool
) -> tuple[DeviceUse, ...]:
    """Each GPU that holds layers, llama.cpp's first device first, the projector on it."""
    opts = r.opts
    uses = tuple(
        DeviceUse(
            g.name,
            g.library,
            f.layers,
            f.weights,
            f.kv,
            s.graph_full if full else s.graph_partial,
            max(free, 0),
            g.unified_memory,
        )
        for g, f, free in reversed(list(zip(gpus, fills, s.frees, strict=True)))
        if f.layers
    )
    if uses and opts.projector_weights + opts.projector_compute:
        first = uses[0]
        uses = (
            replace(
                first,
                weights=first.weights + opts.projector_weights,
                graph=first.graph + opts.projector_compute,
            ),
            *uses[1:],
        )
    return uses


def _cpu_use(
    r: _Request,
    s: _Sizes,
    placed: int,
    n_cpu_moe: int,
    extras: Sequence[ExtraBuffer],
    *,
    offloaded: bool,
) -> DeviceUse:
    """What stays in RAM: the layers not placed, and what llama.cpp keeps on the CPU."""
    info, opts = r.info, r.opts
    full = placed > s.n_rep
    cpu_layers = s.n_rep - min(placed, s.n_rep)
    # The input embedding always stays in RAM (llama.cpp runs get_rows on the CPU),
    # and so do the experts of offloaded layers below n_cpu_moe.
    weights = (
        info.token_embd_bytes
        + info.other_bytes
        + sum(s.layers[:cpu_layers])
        + sum(s.experts[cpu_layers:n_cpu_moe])
    )
    if not full:
        weights += info.output_bytes
    weights += repacked_bytes(info, extras, cpu_layers, n_cpu_moe, not full, opts.use_mmap)
    # With layers (or experts) on the CPU its compute buffer is sized for the whole
    # graph, as llama.cpp's scheduler reserves it; fully offloaded it only stages inputs.
    gpu_only = full and n_cpu_moe == 0
    graph = host_graph_bytes(info, opts.num_batch) if gpu_only else s.graph_full
    if not offloaded:  # no layer offloaded: the runner keeps the projector in RAM too
        weights += opts.projector_weights
        graph += opts.projector_compute
    layers = cpu_layers + (0 if full else 1)
    return DeviceUse("CPU", "CPU", layers, weights, s.kv_layer * cpu_layers, graph, r.avail)


def _notes(
    gpus: Sequence[Device],
    fills: Sequence[Fill],
    caps: Sequence[int],
    cpu: DeviceUse,
    gpu_uses: Sequence[DeviceUse],
    avail: int,
) -> list[str]:
    """Why a layout does not fit: a GPU over its room, or more RAM than there is."""
    notes = [
        f"estimate exceeds free memory on {g.name} by {fmt_bytes(f.used - c)}"
        for g, f, c in zip(gpus, fills, caps, strict=True)
        if f.layers and f.used > c
    ]
    # Unified GPU memory is RAM: counted here once, with the CPU side.
    host = cpu.total + sum(u.total for u in gpu_uses if u.unified)
    if avail > 0 and host > avail:
        notes.append(f"needs {fmt_bytes(host)} of RAM, {fmt_bytes(avail)} available")
    return notes


def _rank(p: LoadPlan) -> tuple[bool, bool, int, int, int, int]:
    """Fits fully first; else the most layers; then fewer remote bytes, fewer GPUs, less VRAM."""
    return (
        p.fits and p.fully_offloaded,
        p.fits,
        p.n_gpu_layers,
        -p.remote_bytes,
        -len(p.gpus),
        -p.vram,
    )


def _best(r: _Request, gpus: Sequence[Device], ctx: int) -> LoadPlan:
    if not gpus:
        return _layout(r, [], ctx)
    return max((_layout(r, s, ctx) for s in gpu_sets(gpus, r.opts.spread)), key=_rank)


def _offloads_all(r: _Request, gpus: Sequence[Device], ctx: int, n_cpu_moe: int) -> bool:
    return _layout(r, gpus, ctx, n_cpu_moe).fully_offloaded


def _with_experts_in_ram(r: _Request, gpus: Sequence[Device], ctx: int) -> LoadPlan | None:
    """The plan offloading every layer with the fewest layers' experts in RAM, if any fits.

    More experts in RAM only frees GPU memory and costs RAM, so the smallest
    count that offloads everything is also the one most likely to fit in RAM.
    """
    found = []
    for s in gpu_sets(gpus, r.opts.spread):
        k = smallest(1, len(r.info.expert_bytes), partial(_offloads_all, r, s, ctx))
        p = _layout(r, s, ctx, k) if k is not None else None
        if p is not None and p.fits:
            found.append(p)
    return max(found, key=lambda p: (-p.n_cpu_moe, _rank(p)), default=None)


def plan(info: ModelInfo, devices: Sequence[Device], opts: PlanOptions) -> LoadPlan:
    """Decide GPU layers, context and KV type for ``info`` on ``devices``."""
    all_gpus = usable_gpus(devices)
    gpus = all_gpus if opts.num_gpu != 0 else []
    cpu_dev = next((d for d in devices if d.kind == "cpu"), None)
    avail = opts.available_ram or (cpu_dev.free if cpu_dev else 0)
    fa = opts.flash_attention.lower() not in ("off", "0", "false", "no")
    kv_type = opts.kv_type.lower() if opts.kv_type.lower() in KV_BLOCKS else "f16"
    if kv_type in QUANTIZED_KV and not fa:
        kv_type = "f16"  # llama.cpp needs flash attention for a quantized V cache
    if opts.num_ctx > 0:
        train = info.context_length
        ladder = [min(opts.num_ctx, train) if train > 0 else opts.num_ctx]
    else:
        start = default_context(info, all_gpus, opts)
        ladder = [start]
        if opts.default_ctx <= 0:  # an explicit LOCALLLM_CONTEXT_LENGTH is kept as set
            ladder += [c for c in CTX_LADDER if c < start and c >= min(MIN_AUTO_CTX, start)]
    r = _Request(info, opts, kv_type, fa, avail, cpu_dev, runner_default_devices(devices))
    result = None
    for ctx in ladder:
        result = _best(r, gpus, ctx)
        if result.fits and (result.fully_offloaded or not gpus or opts.num_gpu >= 0):
            break
    else:
        # Not all layers fit even at the smallest context: a MoE model keeps experts
        # in RAM before whole layers leave the GPUs (a user's num_gpu is kept as asked).
        if result is not None and info.expert_bytes and gpus and opts.num_gpu < 0:
            result = _with_experts_in_ram(r, gpus, result.n_ctx) or result
    assert result is not None
    result = replace(result, ctx_reduced=result.n_ctx != ladder[0])
    return replace(result, reason=plan_reason(result, all_gpus, opts, avail))


def subtract_loaded(devices: Sequence[Device], loaded: Iterable[LoadPlan]) -> list[Device]:
    """Devices with what loaded models use taken off (``min(free, total - accounted)``).

    Reported free memory already reflects runners that finished loading; the
    accounted figure covers one still allocating.
    """
    used: dict[str, int] = {}
    for p in loaded:
        for u in p.gpus:
            used[u.name] = used.get(u.name, 0) + u.total
        # A unified-memory GPU's bytes come out of system RAM as well.
        used[p.cpu.name] = used.get(p.cpu.name, 0) + p.host_bytes
    return [replace(d, free=max(min(d.free, d.total - used.get(d.name, 0)), 0)) for d in devices]


def fits_alongside(
    info: ModelInfo, devices: Sequence[Device], opts: PlanOptions, loaded: Iterable[LoadPlan]
) -> tuple[bool, LoadPlan]:
    """Would ``info`` load next to ``loaded`` without evicting?  And with what plan.

    Like Ollama, a model joins others only if it fits fully (every layer on
    the GPUs when there are any); otherwise the scheduler should evict first.
    """
    loaded = list(loaded)
    ram_used = sum(p.host_bytes for p in loaded)
    avail = opts.available_ram
    if avail:
        avail = max(avail - ram_used, 0)
    p = plan(info, subtract_loaded(devices, loaded), replace(opts, available_ram=avail))
    gpu_ok = p.fully_offloaded or not usable_gpus(devices) or opts.num_gpu >= 0
    return p.fits and gpu_ok, p
