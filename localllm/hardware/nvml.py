"""GPU memory a process holds on NVIDIA devices, as the driver counts it (NVML).

llama.cpp reports the buffers it allocates (weights, KV cache, compute), but a
CUDA process holds more: its context, the kernels loaded from the plugin,
cuBLAS's handles and workspaces and ggml's memory pool. On an H100 with CUDA 13
that was 603 MiB beyond the buffers of a 1B model. ``nvidia-smi`` shows the
whole figure, so ``ps`` must too: this module asks the driver's management
library for it, per process, through ctypes (no dependency; the library comes
with the driver). Without that library (no NVIDIA driver, macOS) or when the
driver does not say (some containers hide other processes' usage), the answer
is ``None`` and callers keep llama.cpp's own figures.

NVML is initialised once per process and never shut down: a daemon asks at
every ``/api/ps``.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE
_INSUFFICIENT_SIZE = 7  # NVML_ERROR_INSUFFICIENT_SIZE


class _ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it.
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


_lock = threading.Lock()
_lib: Any = None
_tried = False


def _nvml() -> Any:
    """The initialised library, or None (looked for once)."""
    global _lib, _tried
    with _lock:
        if not _tried:
            _tried = True
            try:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() == 0:
                    _lib = lib
            except (OSError, AttributeError):
                _lib = None
        return _lib


def _device_processes(lib: Any, handle: ctypes.c_void_p) -> list[_ProcessInfo]:
    count = ctypes.c_uint(0)
    rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), None)
    if rc == 0:
        return []
    if rc != _INSUFFICIENT_SIZE:
        raise OSError(f"nvmlDeviceGetComputeRunningProcesses_v3 returned {rc}")
    # Room for processes that start between the two calls.
    count = ctypes.c_uint(count.value + 8)
    infos = (_ProcessInfo * count.value)()
    rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), infos)
    if rc != 0:
        raise OSError(f"nvmlDeviceGetComputeRunningProcesses_v3 returned {rc}")
    return list(infos[: count.value])


def process_memory(pid: int) -> list[int] | None:
    """Bytes ``pid`` holds on each NVIDIA GPU, in NVML's device order (0 where none).

    ``None`` when NVML is missing, fails, or cannot tell this process's usage.
    """
    lib = _nvml()
    if lib is None:
        return None
    try:
        n = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            return None
        out = []
        for i in range(n.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                return None
            used = 0
            for p in _device_processes(lib, handle):
                if p.pid == pid:
                    if p.usedGpuMemory == _NOT_AVAILABLE:
                        return None
                    used += int(p.usedGpuMemory)
            out.append(used)
    except (OSError, AttributeError):
        return None
    return out if any(out) else None
