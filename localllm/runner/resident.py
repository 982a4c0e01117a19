"""What a loaded model holds: llama.cpp's buffers, with the host compute reserve as used.

The engine reports, per device, the bytes llama.cpp logged allocating for
weights, KV cache and compute (``Engine.memory_report``).  On a GPU an
allocation is memory taken.  In system RAM the compute buffer is not: it is
sized for the worst-case graph (a full batch of outputs over a full context;
with Gemma 3's 262k-token vocabulary the logits alone are 512 MiB at a
512-token batch) and Linux backs its pages only when a step writes them, so
counting it in full made ``ps`` show 1.1 GB for a 253 MB model.

So the host "compute" figure counts what the runner's resident set grew by
since just before the load, beyond its host weights and KV cache, never more
than llama.cpp allocated; then, the same way, the host memory holding idle
slots' prompts (``cache``, engine/park.py), never more than its budget.
Weights and KV always count in full: llama.cpp
zeroes the KV cache at load (it is resident at once), and mapped weights are
read back by every step even when the kernel drops their pages for a while.
The runner sends its resident size from before the load; the daemon reads the
current one from ``/proc`` each time it is asked, so the figure follows the
compute pages that requests touch.  Without ``/proc`` (macOS) the logged
sizes stand as they are.  On NVIDIA GPUs the driver's per-process figure adds
what the CUDA runtime itself holds (``with_gpu_runtime``).
"""

from __future__ import annotations

from localllm.hardware.nvml import process_memory

HOST_KINDS = ("model", "kv")  # counted in full
# Counted only as far as the resident set grew beyond the above, in this order: the
# compute buffer, then the prompt cache of idle slots (engine/park.py), which holds
# nothing until a request parks a slot and never more than its budget.
CAPPED_KINDS = ("compute", "cache")


def rss_bytes(pid: int | None = None) -> int | None:
    """Resident set of ``pid`` (this process by default): anonymous, file-backed and shared.

    ``VmRSS`` counts mapped weight files' pages as well as the process's own
    memory, which is what a model loaded with mmap holds.  ``None`` where there
    is no ``/proc`` or the process is gone.
    """
    path = f"/proc/{pid if pid is not None else 'self'}/status"
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_host(device: str) -> bool:
    """A device name for system RAM (``CPU``, ``CUDA_Host`` pinned buffers, ``BLAS``)."""
    name = device.upper()
    return name.startswith("CPU") or name.endswith("_HOST") or name == "BLAS"


def resident_memory(
    logged: dict[str, dict[str, int]], growth: int | None
) -> dict[str, dict[str, int]]:
    """``logged`` with the host compute buffers counted at what is resident.

    ``growth`` is how much the runner's resident set grew since just before the
    load (``None``: unknown, keep the logged sizes).
    """
    out = {dev: dict(parts) for dev, parts in logged.items()}
    if growth is None:
        return out
    hosts = [parts for dev, parts in out.items() if is_host(dev)]
    held = sum(parts.get(k, 0) for parts in hosts for k in HOST_KINDS)
    left = max(growth - held, 0)
    for kind in CAPPED_KINDS:
        for parts in hosts:
            if kind in parts:
                parts[kind] = min(parts[kind], left)
                left -= parts[kind]
    return out


def with_gpu_runtime(
    memory: dict[str, dict[str, int]], per_gpu: list[int] | None
) -> dict[str, dict[str, int]]:
    """``memory`` with what the CUDA runtime holds beyond llama.cpp's buffers.

    ``per_gpu``: the runner's bytes on each NVIDIA GPU as the driver counts them
    (``hardware.nvml``; ``None``: unknown, nothing added).  The extra is the
    context, loaded kernels, cuBLAS and ggml's pool; it goes to the CUDA devices
    as a "runtime" part, shared by the buffers each holds, because NVML numbers
    GPUs in bus order and CUDA fastest first.
    """
    cuda = _cuda_devices(memory)
    if not cuda or not per_gpu:
        return memory
    logged = {dev: sum(memory[dev].values()) for dev in cuda}
    extra = sum(per_gpu) - sum(logged.values())
    if extra <= 0:
        return memory
    out = {dev: dict(parts) for dev, parts in memory.items()}
    weight = {dev: logged[dev] or 1 for dev in cuda}  # a device with no buffers still shares
    total = sum(weight.values())
    for dev in cuda:
        out[dev]["runtime"] = extra * weight[dev] // total
    return out


def _cuda_devices(memory: dict[str, dict[str, int]]) -> list[str]:
    return [dev for dev in memory if dev.upper().startswith("CUDA") and not is_host(dev)]


def held_now(
    logged: dict[str, dict[str, int]], rss_before: int | None, pid: int | None
) -> dict[str, dict[str, int]]:
    """``resident_memory`` with the growth of runner ``pid`` read now (``None``: gone),
    and on NVIDIA GPUs what the driver says the runner holds there."""
    now = rss_bytes(pid) if pid is not None and rss_before is not None else None
    growth = now - rss_before if now is not None and rss_before is not None else None
    held = resident_memory(logged, growth)
    if pid is not None and _cuda_devices(held):  # NVML is asked only for CUDA models
        held = with_gpu_runtime(held, process_memory(pid))
    return held
