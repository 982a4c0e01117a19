"""Where a model's layers go and how much context it gets: ``plan(info, devices, opts)``.

Pure functions, no I/O.  The estimate (scheduler/estimate.py) gives bytes per
layer (weights + its KV cache), the output layer and the compute graph; the
placement fills GPUs from the last layer down, the output layer last, exactly
as llama.cpp's ``n_gpu_layers`` counts them (``L + 1`` means everything).
Each GPU keeps a fixed reserve (457 MiB, 512 MiB on Metal) plus
``LOCALLLM_GPU_OVERHEAD`` and room for the compute graph.  An automatic context
starts from a VRAM tier and steps down until the model is fully offloaded
(or fits in RAM), the way llama.cpp's own fitting reduces context first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from localllm.gguf_info import ModelInfo
from localllm.hardware.detect import Device
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
from localllm.scheduler.plan_types import DeviceUse, LoadPlan, PlanOptions

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

MIN_RESERVE = 457 * MiB  # CUDA / ROCm / Vulkan context and driver allocations
MIN_RESERVE_METAL = 512 * MiB
CTX_LADDER = (262144, 131072, 65536, 32768, 16384, 8192, 4096)
MIN_AUTO_CTX = 4096


def _reserve(dev: Device) -> int:
    return MIN_RESERVE_METAL if dev.library == "Metal" else MIN_RESERVE


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


@dataclass
class _Fill:
    dev: Device
    cap: int  # bytes usable by layers (reserve, overhead and graph already taken off)
    layers: int = 0
    weights: int = 0
    kv: int = 0

    @property
    def used(self) -> int:
        return self.weights + self.kv


def _place(gpus: Sequence[Device], caps: list[int], lb: list[int], kv_l: int, target: int,
           forced: bool, out_bytes: int, reserve_out: bool) -> tuple[list[_Fill], int]:
    """Fill ``gpus`` from the top layer down; the first GPU takes the top layers.

    With ``reserve_out`` room for the output layer (placed last) is kept on the
    first GPU.  ``forced`` (a user's ``num_gpu``) places ``target`` layers
    even where the estimate says they do not fit.
    """
    fills = [_Fill(g, c) for g, c in zip(gpus, caps, strict=True)]
    if not fills:
        return fills, 0
    out_reserve = out_bytes if reserve_out else 0
    fills[0].cap -= out_reserve
    n_rep, placed, cur = len(lb), 0, 0
    for i in reversed(range(n_rep)):
        if placed >= target:
            break
        size = lb[i] + kv_l
        while cur < len(fills) and fills[cur].used + size > fills[cur].cap:
            cur += 1
        if cur == len(fills) and not forced:
            break
        # Forced past the estimate: the user knows their driver better than we do.
        f = fills[cur] if cur < len(fills) else max(fills, key=lambda x: x.cap - x.used)
        f.layers, f.weights, f.kv, placed = f.layers + 1, f.weights + lb[i], f.kv + kv_l, placed + 1
    fills[0].cap += out_reserve
    if placed == n_rep and target > n_rep:
        # llama.cpp puts the output layer on the device holding the top layers.
        top = next((f for f in fills if f.layers), fills[0])
        if top.used + out_bytes <= top.cap or forced:
            top.layers, top.weights = top.layers + 1, top.weights + out_bytes
            placed += 1
    return fills, placed


def _layout(info: ModelInfo, gpus: Sequence[Device], ctx: int, opts: PlanOptions,
            kv_type: str, fa: bool, avail: int) -> LoadPlan:
    """Place layers for one context on ``gpus`` (fill order: the first takes the top layers)."""
    n_rep = max(info.n_layers, len(info.layer_bytes))
    lb = list(info.layer_bytes) + [0] * (n_rep - len(info.layer_bytes))
    np_ = max(opts.num_parallel, 1)
    kv_l = kv_layer_bytes(info, kv_cells(ctx, np_), kv_type)
    kv_total = kv_l * info.n_layers
    g_full, g_partial = graph_bytes(info, ctx, np_, opts.num_batch, fa, kv_total)
    if len(gpus) > 1:
        g_full = g_partial
    if any(g.library == "Metal" for g in gpus):
        g_partial = g_full
    reserve_graph = max(g_full, g_partial)
    fixed_ram = info.token_embd_bytes + info.other_bytes + host_graph_bytes(info, opts.num_batch)
    frees = []
    for g in gpus:
        free = g.free
        if g.unified_memory and avail > 0:
            free = min(free, avail - fixed_ram)  # its memory is the same RAM the CPU side uses
        frees.append(free)
    target = n_rep + 1 if opts.num_gpu < 0 else min(opts.num_gpu, n_rep + 1)
    caps = [f - opts.gpu_overhead - _reserve(g) - reserve_graph
            for g, f in zip(gpus, frees, strict=True)]
    # First try keeping room for the output layer next to the top layers; if not
    # every layer fits that way, fill without it (more layers beat the output).
    forced = opts.num_gpu >= 0
    fills, placed = _place(gpus, caps, lb, kv_l, target, forced, info.output_bytes, True)
    if placed < n_rep + 1:
        fills, placed = _place(gpus, caps, lb, kv_l, target, forced, info.output_bytes, False)
    full = placed > n_rep
    gpu_uses = tuple(
        DeviceUse(f.dev.name, f.dev.library, f.layers, f.weights, f.kv,
                  g_full if full else g_partial, max(free, 0))
        for f, free in reversed(list(zip(fills, frees, strict=True))) if f.layers
    )
    cpu_layers = n_rep - min(placed, n_rep)
    # The input embedding always stays in RAM (llama.cpp runs get_rows on the CPU).
    cpu_weights = info.token_embd_bytes + info.other_bytes + sum(lb[:cpu_layers])
    if not full:
        cpu_weights += info.output_bytes
    # With layers on the CPU its compute buffer is sized for the whole graph,
    # as llama.cpp's scheduler reserves it; fully offloaded it only stages inputs.
    cpu_graph = host_graph_bytes(info, opts.num_batch) if full else g_full
    cpu = DeviceUse("CPU", "CPU", cpu_layers + (0 if full else 1), cpu_weights,
                    kv_l * cpu_layers, cpu_graph, avail)
    over = [f for f in fills if f.layers and f.used > f.cap]
    unified = sum(u.total for u in gpu_uses
                  if any(g.name == u.name and g.unified_memory for g in gpus))
    ram_short = avail > 0 and cpu.total + unified > avail
    notes = [f"estimate exceeds free memory on {f.dev.name} by {fmt_bytes(f.used - f.cap)}"
             for f in over]
    if ram_short:
        notes.append(f"needs {fmt_bytes(cpu.total + unified)} of RAM, "
                     f"{fmt_bytes(avail)} available")
    return LoadPlan(placed, n_rep + 1, ctx, np_, opts.num_batch, kv_type, fa, gpu_uses, cpu,
                    fits=not over and not ram_short, reason="", notes=tuple(notes))


def _candidates(gpus: Sequence[Device]) -> list[list[Device]]:
    """GPU sets to try: per library, the largest-free prefixes (fewest GPUs first)."""
    by_lib: dict[str, list[Device]] = {}
    for g in gpus:
        by_lib.setdefault(g.library, []).append(g)
    sets: list[list[Device]] = []
    for devs in by_lib.values():
        devs = sorted(devs, key=lambda d: d.free, reverse=True)
        sets.extend(devs[:k] for k in range(1, len(devs) + 1))
    return sets


def _best(info: ModelInfo, gpus: Sequence[Device], ctx: int, opts: PlanOptions, kv_type: str,
          fa: bool, avail: int) -> LoadPlan:
    if not gpus:
        return _layout(info, [], ctx, opts, kv_type, fa, avail)
    plans = [_layout(info, s, ctx, opts, kv_type, fa, avail) for s in _candidates(gpus)]
    # Fits fully with the fewest GPUs; else the most layers; ties: less VRAM spent.
    return max(plans, key=lambda p: (p.fits and p.fully_offloaded, p.fits,
                                     p.n_gpu_layers, -len(p.gpus), -p.vram))


def _reason(p: LoadPlan, gpus: Sequence[Device], opts: PlanOptions, avail: int) -> str:
    names = ", ".join(g.name for g in reversed(p.gpus))
    if not p.gpus:
        why = ("num_gpu=0" if opts.num_gpu == 0 and gpus else
               "no GPU the engine can use" if not gpus else
               f"no GPU has room for a layer ({gpus[0].name}: {fmt_bytes(gpus[0].free)} free)")
        text = f"CPU only: {why}"
        if p.fits and avail:
            text += f" ({fmt_bytes(p.ram)} of RAM)"
    elif p.fully_offloaded:
        free = sum(g.free for g in p.gpus)
        text = f"all {p.n_layers} layers on {names} ({fmt_bytes(p.vram)} of {fmt_bytes(free)} free)"
    else:
        weights = p.cpu.weights + sum(g.weights for g in p.gpus)
        text = (f"{p.n_gpu_layers}/{p.n_layers} layers on {names}, rest on CPU: "
                f"KV cache for {p.n_ctx * p.n_parallel} tokens needs {fmt_bytes(p.kv_bytes)}, "
                f"weights {fmt_bytes(weights)}, {fmt_bytes(sum(g.free for g in p.gpus))} free")
    if opts.num_gpu > 0 and p.gpus:
        text = f"num_gpu={opts.num_gpu}: {text}"
    if p.notes:
        text += "; does not fit: " + "; ".join(p.notes)
    if p.ctx_reduced:
        text += f"; context reduced to {p.n_ctx} to fit"
    return text


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
    result = None
    for ctx in ladder:
        result = _best(info, gpus, ctx, opts, kv_type, fa, avail)
        done = result.fits and (result.fully_offloaded or not gpus or opts.num_gpu >= 0)
        if done:
            break
    assert result is not None
    result = replace(result, ctx_reduced=result.n_ctx != ladder[0])
    return replace(result, reason=_reason(result, all_gpus, opts, avail))


def subtract_loaded(devices: Sequence[Device], loaded: Iterable[LoadPlan]) -> list[Device]:
    """Devices with what loaded models use taken off (``min(free, total - accounted)``).

    Reported free memory already reflects runners that finished loading; the
    accounted figure covers one still allocating.
    """
    used: dict[str, int] = {}
    for p in loaded:
        for u in (*p.gpus, p.cpu):
            used[u.name] = used.get(u.name, 0) + u.total
    return [replace(d, free=max(min(d.free, d.total - used.get(d.name, 0)), 0))
            for d in devices]


def fits_alongside(info: ModelInfo, devices: Sequence[Device], opts: PlanOptions,
                   loaded: Iterable[LoadPlan]) -> tuple[bool, LoadPlan]:
    """Would ``info`` load next to ``loaded`` without evicting?  And with what plan.

    Like Ollama, a model joins others only if it fits fully (every layer on
    the GPUs when there are any); otherwise the scheduler should evict first.
    """
    loaded = list(loaded)
    ram_used = sum(p.ram for p in loaded)
    avail = opts.available_ram
    if avail:
        avail = max(avail - ram_used, 0)
    p = plan(info, subtract_loaded(devices, loaded), replace(opts, available_ram=avail))
    gpu_ok = p.fully_offloaded or not usable_gpus(devices) or opts.num_gpu >= 0
    return p.fits and gpu_ok, p
