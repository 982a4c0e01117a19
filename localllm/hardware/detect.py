"""What this machine offers the engine: ggml's devices, the CPU, the GPUs the drivers see.

``detect()`` runs ``python -m localllm.engine.probe_child`` in a child process with
a timeout (the daemon never imports the native module: a crash while ggml
initialises a GPU backend or loads a plugin must not take it down), merges the
answer with the CPU facts, the driver probes and the RPC workers' devices
(asked over the wire by ``hardware.rpc``), and caches the result for the
process.  When the native module is missing or broken it says so, with the
error text, and offers one CPU device so planning still works.  Facts only: what
to do about them (a GPU without its plugin) is ``backends/advice.py``'s.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from localllm.hardware.cpu import CPUInfo, available_ram, cpu_info
from localllm.hardware.cpu_buffers import ExtraBuffer, parse_extra_buffers
from localllm.hardware.probe_answer import (
    BuildInfo,
    PluginReport,
    ProbeAnswer,
    ProbeDevice,
    parse_probe_output,
)
from localllm.hardware.probes import GPUProbe, probe_all
from localllm.hardware.rpc import WorkerStatus

DeviceKind = Literal["cpu", "gpu", "igpu", "accel"]
PROBE_TIMEOUT_S = 30.0
_KINDS: dict[str | int, DeviceKind] = {
    "cpu": "cpu",
    "gpu": "gpu",
    "igpu": "igpu",
    "accel": "accel",
    0: "cpu",
    1: "gpu",
    2: "igpu",
    3: "accel",
}
# ggml device names are "<backend><index>"; a few backends use other spellings.
_LIBRARY_ALIASES = {"MTL": "Metal", "HIP": "ROCm", "VULKAN": "Vulkan", "CANN": "CANN"}


@dataclass(frozen=True)
class Device:
    """One ggml backend device; memory in bytes."""

    name: str  # ggml's name: "CPU", "CUDA0", "Metal", "Vulkan1", "ROCm0"
    description: str  # e.g. "NVIDIA GeForce RTX 4090"
    kind: DeviceKind
    free: int
    total: int
    library: str  # "CPU", "CUDA", "ROCm", "Vulkan", "Metal", ...
    # A GPU with a pinned host buffer type (CUDA, Vulkan): llama.cpp keeps CPU-side weights
    # there, not in the CPU's extra buffers.  Those are the CPU device's (hardware/cpu_buffers.py).
    host_buffer: bool = False
    extra_buffers: tuple[ExtraBuffer, ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("gpu", "igpu")

    @property
    def unified_memory(self) -> bool:
        """The GPU's memory is system RAM (Apple Silicon, integrated GPUs)."""
        return self.library == "Metal" or self.kind == "igpu"


@dataclass(frozen=True)
class Hardware:
    """Everything ``detect`` learned, ready for the planner and ``localllm doctor``."""

    devices: tuple[Device, ...]
    cpu: CPUInfo
    native_ok: bool
    native_error: str  # "" when the native module loaded
    system_info: str  # llama_print_system_info()
    build_info: BuildInfo = field(default_factory=dict, hash=False)
    gpus_present: tuple[GPUProbe, ...] = ()  # what the drivers report, usable or not
    ggml_version: str = ""  # the core's; plugins must be built for it
    plugins: tuple[PluginReport, ...] = ()  # one report per plugin file the probe tried
    workers: tuple[WorkerStatus, ...] = ()  # LOCALLLM_RPC_WORKERS as last seen

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.is_gpu)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def library_of(name: str) -> str:
    """``"CUDA0"`` -> ``"CUDA"``; ``"MTL0"`` -> ``"Metal"``; ``"RPC[host:port]"`` -> ``"RPC"``."""
    if name.startswith("RPC["):
        return "RPC"
    base = name.rstrip("0123456789") or name
    return _LIBRARY_ALIASES.get(base.upper(), base)


def device_from_probe(raw: ProbeDevice, cpu_buffers: tuple[ExtraBuffer, ...] = ()) -> Device:
    """A probe's device; the CPU device carries ``cpu_buffers``, its extra buffer types."""
    name = str(raw.get("name", "?"))
    kind = _KINDS.get(raw.get("type", ""), "accel")
    return Device(
        name=name,
        description=str(raw.get("description", "")),
        kind=kind,
        free=max(int(raw.get("free") or 0), 0),
        total=max(int(raw.get("total") or 0), 0),
        library=library_of(name),
        host_buffer=raw.get("host_buffer") is True,
        extra_buffers=cpu_buffers if kind == "cpu" else (),
    )


def cpu_device(cpu: CPUInfo) -> Device:
    """The stand-in device when the native module cannot tell us its own."""
    return Device("CPU", cpu.model, "cpu", cpu.available_ram, cpu.total_ram, "CPU")


def _with_ram(dev: Device, cpu: CPUInfo) -> Device:
    """ggml's CPU device reports total RAM as free; /proc/meminfo knows better."""
    if dev.kind == "cpu" and cpu.available_ram > 0:
        return replace(dev, free=min(dev.free or cpu.available_ram, cpu.available_ram))
    return dev


def run_probe(timeout: float = PROBE_TIMEOUT_S, argv: list[str] | None = None) -> ProbeAnswer:
    """Run the probe child; its JSON answer, or ``{"ok": False, "error": ...}``.

    ``argv`` replaces the child's command line (tests use it to simulate crashes).
    """
    from localllm import children

    try:
        out = subprocess.run(
            argv or children.argv("localllm.engine.probe_child"),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=children.child_env(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"native probe timed out after {timeout:g} s"}
    except OSError as exc:
        return {"ok": False, "error": f"could not start the native probe: {exc}"}
    return parse_probe_output(out.returncode, out.stdout, out.stderr)


def remote_devices(workers: tuple[WorkerStatus, ...]) -> tuple[Device, ...]:
    """The devices that RPC workers serve, as planner devices (ggml reports them as GPUs)."""
    return tuple(
        Device(d.name, f"{w.endpoint} (RPC worker)", "gpu", d.free, d.total, "RPC")
        for w in workers
        for d in w.devices
    )


def build_hardware(
    answer: ProbeAnswer,
    cpu: CPUInfo,
    gpus: list[GPUProbe],
    workers: tuple[WorkerStatus, ...] = (),
) -> Hardware:
    """Combine the probe's answer, the CPU facts, the driver probes and the workers (pure)."""
    ok = bool(answer.get("ok"))
    error = "" if ok else str(answer.get("error") or "unknown error")
    extra = parse_extra_buffers(answer.get("cpu_buffers"))
    devices = (
        tuple(
            _with_ram(device_from_probe(d, extra), cpu)
            for d in answer.get("devices") or []
            if isinstance(d, dict)
        )
        if ok
        else ()
    )
    if not any(d.kind == "cpu" for d in devices):
        devices = (*devices, cpu_device(cpu))
    devices = (*devices, *remote_devices(workers))
    plugins = tuple(p for p in answer.get("plugins") or [] if isinstance(p, dict))
    build = answer.get("build_info")
    return Hardware(
        devices=devices,
        cpu=cpu,
        native_ok=ok,
        native_error=error,
        system_info=str(answer.get("system_info") or ""),
        build_info=build if isinstance(build, dict) else ({"info": build} if build else {}),
        gpus_present=tuple(gpus),
        ggml_version=str(answer.get("ggml_version") or ""),
        plugins=plugins,
        workers=workers,
    )


_lock = threading.Lock()
_cached: Hardware | None = None
_last_seen: dict[str, WorkerStatus] = {}  # endpoint -> last answer with devices


def query_workers(endpoints: list[str] | None = None) -> tuple[WorkerStatus, ...]:
    """Ask every configured RPC worker, in parallel; a busy one keeps its last devices.

    A worker serves one client at a time, so one that a loaded model's runner is
    using answers "busy": its devices are still there, held by that runner.
    """
    from concurrent.futures import ThreadPoolExecutor

    from localllm import config
    from localllm.hardware.rpc import query

    eps = list(config.RPC_WORKERS.get() if endpoints is None else endpoints)
    if not eps:
        return ()
    with ThreadPoolExecutor(max_workers=min(len(eps), 8)) as pool:
        answers = list(pool.map(query, eps))
    out = []
    for w in answers:
        if w.ready:
            _last_seen[w.endpoint] = w
        elif w.state == "busy" and w.endpoint in _last_seen:
            w = replace(
                w, devices=_last_seen[w.endpoint].devices, version=_last_seen[w.endpoint].version
            )
        out.append(w)
    return tuple(out)


def detect(refresh: bool = False, timeout: float = PROBE_TIMEOUT_S) -> Hardware:
    """This machine's hardware; cached for the process unless ``refresh`` (free memory moves)."""
    global _cached
    with _lock:
        if _cached is None or refresh:
            _cached = build_hardware(run_probe(timeout), cpu_info(), probe_all(), query_workers())
        return _cached


def cached() -> Hardware | None:
    """The last detection's answer, None before the first: never probes, never waits."""
    return _cached


def refresh_memory(timeout: float = PROBE_TIMEOUT_S) -> Hardware:
    """Fresh free-memory figures, for the scheduler right before a load.

    System RAM is re-read every time (cheap), and so are the RPC workers.  GPU
    free memory is only known to ggml, so the probe child runs again only when
    the cached answer has local GPUs.
    """
    global _cached
    hw = detect(timeout=timeout)
    if any(d.is_gpu and d.library != "RPC" for d in hw.devices) and hw.native_ok:
        return detect(refresh=True, timeout=timeout)
    ram = available_ram()
    workers = query_workers()
    with _lock:
        cpu = replace(hw.cpu, available_ram=ram)
        local = tuple(
            replace(d, free=ram) if d.kind == "cpu" else d for d in hw.devices if d.library != "RPC"
        )
        _cached = replace(hw, cpu=cpu, devices=(*local, *remote_devices(workers)), workers=workers)
        return _cached
