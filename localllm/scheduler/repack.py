"""The repacked copies the CPU backend keeps of the weights in RAM (pure arithmetic).

llama.cpp puts each weight the CPU holds in the first buffer type of its CPU
list that takes it (``make_cpu_buft_list`` in src/llama-model.cpp,
``select_weight_buft`` in src/llama-model-loader.cpp): the pinned host buffer
of the first of the model's GPUs that has one (CUDA, Vulkan), then the CPU
backend's extra buffer types (AMX, KleidiAI, CPU_REPACK: ``use_extra_bufts``,
on by default), then the plain CPU buffer.  A weight in an extra buffer is a
repacked copy in anonymous memory (``ggml_aligned_malloc``), sized by the
buffer type (AMX adds per-block sums to Q8_0, Q4_K, Q5_K and IQ4_XS).  The
probe asks ggml which weights each extra type takes (hardware/cpu_buffers.py);
this module applies that to a GGUF's matrices (``ModelInfo.matrices``).

What the original still costs: with mmap, llama.cpp's CPU buffer is one
mapping of the file from the first to the last tensor it keeps, and every
layer keeps its norms there, so a layer's repacked matrices stay mapped; their
pages, read once for the repacking, stay resident (clean and reclaimable, but
counted in VmRSS and in llama.cpp's own CPU_Mapped size).  A matrix outside
that span (the output matrix, first or last in the usual file orders, or the
experts of offloaded layers) is unmapped after the load (``unmap_fragment`` in
``load_all_data``).  Without mmap only the copy exists.  Measured on a Xeon
with AMX, a 58M-parameter F16 llama on the CPU: AMX took all 57 matrices
(79.2 MiB); the file's mapping, token_embd to output_norm (79.3 MiB, the
layers' originals inside it), was all resident after the load, the output
matrix past it unmapped; llama.cpp logged exactly those two buffers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from localllm.gguf.info import Matrix, ModelInfo
from localllm.hardware.cpu_buffers import BufferRule, ExtraBuffer
from localllm.hardware.detect import Device
from localllm.scheduler.plan_types import REMOTE_LIBRARY


def runner_default_devices(devices: Iterable[Device]) -> tuple[Device, ...]:
    """The devices a runner gives llama.cpp for a plan with no GPU: every local offload
    device (engine/plugins.py ``local_offload_devices``), with no layers on them.
    ``devices`` are the planner's, which LOCALLLM_LLM_LIBRARY has already narrowed
    (scheduler/placement.py), as the runner narrows its own."""
    return tuple(
        d for d in devices if d.kind in ("gpu", "igpu", "accel") and d.library != REMOTE_LIBRARY
    )


def usable_extras(
    cpu: Device | None, model_devices: Iterable[Device], mode: str = "auto"
) -> tuple[ExtraBuffer, ...]:
    """The CPU's extra buffer types a load can use: none when one of the model's devices
    has a host buffer, which comes first in llama.cpp's CPU list and takes every matrix
    (under mmap it then stays in the mapped file: no copy at all); under
    LOCALLLM_CPU_REPACK ``mode`` none when ``off``, and with ``auto`` only those the
    probe's self-test kept (engine/cpu_check.py: a broken AMX goes, CPU_REPACK stays)."""
    if cpu is None or mode == "off" or any(d.host_buffer for d in model_devices):
        return ()
    if mode == "auto":
        return tuple(b for b in cpu.extra_buffers if b.auto)
    return cpu.extra_buffers


def describe(mode: str, cpu: Device | None) -> str:
    """What LOCALLLM_CPU_REPACK does here, for ``doctor``: the mode, each type kept or
    left out, and why ("auto: CPU_REPACK used; AMX left out (self-test crashed: ...)")."""
    extras = cpu.extra_buffers if cpu is not None else ()
    if not extras:
        return f"{mode}: this CPU backend has no extra buffer types"
    if mode == "off":
        return (
            "off: weights stay as the file has them ("
            + ", ".join(b.name for b in extras)
            + " unused)"
        )
    used = usable_extras(cpu, (), mode)
    parts = [
        (", ".join(b.name for b in used) or "none")
        + " used"
        + (" (not tested)" if mode == "on" else "")
    ]
    parts += [
        f"{b.name} left out ({b.fault or 'works, but only all types can be left out here'})"
        for b in extras
        if b not in used
    ]
    return f"{mode}: " + "; ".join(parts)


def rule_for(extras: Sequence[ExtraBuffer], m: Matrix) -> BufferRule | None:
    """The rule of the first extra buffer type that takes ``m``, in llama.cpp's order."""
    dims = 3 if m.experts else 2
    for b in extras:
        rule = b.rule_for(m.ggml_type, dims, m.k, m.rows)
        if rule is not None:
            return rule
    return None


def repacked_bytes(
    info: ModelInfo,
    extras: Sequence[ExtraBuffer],
    cpu_layers: int,
    n_cpu_moe: int = 0,
    output_on_cpu: bool = True,
    use_mmap: bool = True,
) -> int:
    """Bytes the repacked copies add to RAM beyond the weights' file bytes.

    ``cpu_layers`` are the lowest layers, on the CPU; the experts of the layers
    below ``n_cpu_moe`` stay in RAM too (their override to the CPU buffer type
    considers the extra types as well); the output layer's matrices when
    ``output_on_cpu``.  Each repacked matrix adds its copy and, where its file
    pages are no longer held (see the module docstring), takes its own bytes off.
    """
    if not extras:
        return 0
    added = 0
    for m in info.matrices:
        in_cpu_layer = 0 <= m.layer < cpu_layers or (m.layer < 0 and output_on_cpu)
        if not (in_cpu_layer or (m.experts and 0 <= m.layer < n_cpu_moe)):
            continue
        rule = rule_for(extras, m)
        if rule is None:
            continue
        held = use_mmap and m.inner and in_cpu_layer
        added += rule.copy_bytes(m.nbytes) - (0 if held else m.nbytes)
    return added
