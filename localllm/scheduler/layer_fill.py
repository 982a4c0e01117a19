"""Which layers each GPU of a chosen set takes, and which GPU sets to try (pure arithmetic).

``assign`` fills GPUs from the top layer down the way llama.cpp counts
``n_gpu_layers`` (the output layer last, on the GPU holding the top layers).
When several GPUs hold every wanted layer it scales all their capacities by
one factor, as small as still fits, so each GPU's share follows its free
memory instead of piling onto the first.  ``gpu_sets`` lists the device sets
the planner compares.  ``gpu_layer_bytes`` and ``smallest`` serve the MoE
search for llama.cpp's ``--n-cpu-moe`` (experts of the lowest layers in RAM).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from localllm.hardware.detect import Device
from localllm.scheduler.plan_types import REMOTE_LIBRARY as REMOTE

SPLIT_STEPS = 24  # bisection steps for the common capacity factor: ~1e-7 of each GPU


@dataclass
class Fill:
    cap: int  # bytes usable by layers (reserve, overhead and graph already taken off)
    layers: int = 0
    weights: int = 0
    kv: int = 0

    @property
    def used(self) -> int:
        return self.weights + self.kv


@dataclass(frozen=True)
class Layers:
    """The layers to place: each one's weights on a GPU (``sizes``, bottom first), the KV
    cache each adds, how many llama.cpp is to offload (its ``n_gpu_layers`` count, the
    output layer last) and the output layer's bytes."""

    sizes: Sequence[int]
    kv: int
    target: int
    out_bytes: int


def _place(
    caps: Sequence[int], layers: Layers, forced: bool, reserve_out: bool
) -> tuple[list[Fill], int]:
    """Fill from the top layer down; the first GPU takes the top layers.

    With ``reserve_out`` room for the output layer (placed last) is kept on the
    first GPU.  ``forced`` (a user's ``num_gpu``) places ``target`` layers
    even where the estimate says they do not fit.
    """
    sizes, kv_l, target, out_bytes = layers.sizes, layers.kv, layers.target, layers.out_bytes
    fills = [Fill(c) for c in caps]
    if not fills:
        return fills, 0
    out_reserve = out_bytes if reserve_out else 0
    fills[0].cap -= out_reserve
    n_rep, placed, cur = len(sizes), 0, 0
    for i in reversed(range(n_rep)):
        if placed >= target:
            break
        size = sizes[i] + kv_l
        while cur < len(fills) and fills[cur].used + size > fills[cur].cap:
            cur += 1
        if cur == len(fills) and not forced:
            break
        # Forced past the estimate: the user knows their driver better than we do.
        f = fills[cur] if cur < len(fills) else max(fills, key=lambda x: x.cap - x.used)
        f.layers, f.weights, f.kv = f.layers + 1, f.weights + sizes[i], f.kv + kv_l
        placed += 1
    fills[0].cap += out_reserve
    if placed == n_rep and target > n_rep:
        # llama.cpp puts the output layer on the device holding the top layers.
        top = next((f for f in fills if f.layers), fills[0])
        if top.used + out_bytes <= top.cap or forced:
            top.layers, top.weights = top.layers + 1, top.weights + out_bytes
            placed += 1
    return fills, placed


def _fill(caps: Sequence[int], layers: Layers, forced: bool) -> tuple[list[Fill], int]:
    # First keep room for the output layer next to the top layers; if not every
    # layer fits that way, fill without it (more layers beat the output).
    fills, placed = _place(caps, layers, forced, True)
    if placed < len(layers.sizes) + 1:
        fills, placed = _place(caps, layers, forced, False)
    return fills, placed


def assign(
    caps: Sequence[int], layers: Layers, forced: bool, shrink: Sequence[bool]
) -> tuple[list[Fill], int]:
    """Place up to ``layers.target`` layers on GPUs with ``caps`` bytes.

    The first GPU takes the top layers.  ``forced`` (a user's ``num_gpu``) places
    them even where the estimate says they do not fit.  ``shrink`` marks the GPUs
    whose room the proportional split may leave unused (see ``shrinkable``).
    Returns the fills (with the real caps) and how many layers were placed.
    """
    want = min(layers.target, len(layers.sizes) + 1)
    fills, placed = _fill(caps, layers, False)
    if placed < want:
        return _fill(caps, layers, True) if forced else (fills, placed)
    if len(caps) < 2:
        return fills, placed
    # Everything wanted fits: find the smallest common share of every GPU's room
    # that still holds it, so the layers split in proportion to free memory.
    lo, hi = 0.0, 1.0
    for _ in range(SPLIT_STEPS):
        mid = (lo + hi) / 2
        scaled = [int(max(c, 0) * mid) if sh else c for c, sh in zip(caps, shrink, strict=True)]
        trial, n = _fill(scaled, layers, False)
        if n >= want:
            hi, fills = mid, trial
        else:
            lo = mid
    for f, c in zip(fills, caps, strict=True):
        f.cap = c
    return fills, placed


def _by_free(devs: Iterable[Device]) -> list[Device]:
    return sorted(devs, key=lambda d: d.free, reverse=True)


def gpu_sets(gpus: Sequence[Device], spread: bool) -> list[list[Device]]:
    """GPU sets to try, each in fill order (the first takes the top layers).

    Per local library the largest-free prefixes (fewest GPUs first), then all
    of them plus remote (RPC) devices, largest first: a model spills onto other
    machines only past the local GPUs.  Two local libraries are never mixed:
    CUDA0 and Vulkan0 may be one card seen twice.  ``spread`` keeps only the
    sets with every GPU.  Within a set llama.cpp's order is remote devices
    first (the lowest layers, so fewer activations cross the network), then
    local ones as enumerated; the fill order is its reverse.
    """
    index = {g.name: i for i, g in enumerate(gpus)}

    def fill_order(devs: list[Device]) -> list[Device]:
        return sorted(devs, key=lambda g: (g.library != REMOTE, index[g.name]), reverse=True)

    remote = _by_free(g for g in gpus if g.library == REMOTE)
    by_lib: dict[str, list[Device]] = {}
    for g in gpus:
        if g.library != REMOTE:
            by_lib.setdefault(g.library, []).append(g)
    sets: list[list[Device]] = []
    for devs in [_by_free(d) for d in by_lib.values()] or [[]]:
        if spread:
            sets.append(devs + remote)
            continue
        sets.extend(devs[:k] for k in range(1, len(devs) + 1))
        sets.extend(devs + remote[:k] for k in range(1, len(remote) + 1))
    return [fill_order(s) for s in sets if s]


def shrinkable(gpus: Sequence[Device], spread: bool) -> list[bool]:
    """GPUs the proportional split may leave room on: all, but with remote devices in a
    set local GPUs fill up first (fewer bytes on other machines) unless ``spread``."""
    has_remote = any(g.library == REMOTE for g in gpus)
    return [spread or not has_remote or g.library == REMOTE for g in gpus]


def gpu_layer_bytes(
    layer_bytes: Sequence[int], expert_bytes: Sequence[int], n_cpu_moe: int
) -> list[int]:
    """Each layer's weights on a GPU when the experts of the first ``n_cpu_moe`` stay in RAM."""
    return [
        b - (expert_bytes[i] if i < n_cpu_moe and i < len(expert_bytes) else 0)
        for i, b in enumerate(layer_bytes)
    ]


def smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest ``n`` in ``[lo, hi]`` with ``ok(n)`` (false, then true); None if none."""
    if lo > hi or not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
