"""ggml backend plugins and RPC workers inside a native process (runner, probe, worker).

This module owns what the process-wide ggml registry holds beyond the core's
CPU backend: the plugins (``libggml-<name>.so`` built with ``GGML_BACKEND_DL``)
from the folder for this core's ggml version, and the devices of ggml RPC
servers.  It also names devices the same way in every process, so the daemon's
planner, the probe and the runner agree on what "RPC[host:port]" means, and it
turns a plan's device names into the registry indices a load takes (``place``).

Loading is idempotent per process.  A plugin that ggml refuses (wrong API
version, missing driver library, not a plugin at all) is reported with ggml's
own reason and skipped; nothing here raises for a bad file.  Before ggml sees a
file, ``backends.trust`` checks that no other account could have written it or
a folder above it (loading a plugin runs its code): a refused plugin is reported
the same way, with the path and the fix, and never opened.  The same goes for the
runtime libraries a pack put beside it (``<backend>-libs/``, which the plugin's
runpath names, so the loader takes cuBLAS and the CUDA runtime from there): the
folder and every file in it are checked too, and one that others could have
written keeps the plugin from being opened.  A pack that named NVIDIA's runtime
wheels instead has them loaded from the cache just before the plugin
(``backends.cuda.runtime_wheels.preload``), checked the same way.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from localllm import config
from localllm.engine import cpu_check
from localllm.engine.binding import native, take_log
from localllm.errors import LocalLLMError
from localllm.hardware.detect import library_of
from localllm.hardware.rpc import reachable
from localllm.runner.messages import LoadOptions

PLUGIN_SUFFIX = (
    ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"
)
_DEV_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}
_log = logging.getLogger(__name__)
_loaded: dict[str, dict[str, Any]] = {}  # plugin path -> its report
_workers: dict[str, int] = {}  # endpoint -> devices it brought


@dataclass(frozen=True)
class NativeDevice:
    """One device in this process's ggml registry."""

    index: int  # registry index, what the shim's placement calls take
    name: str  # stable across processes (see ``stable_names``)
    ggml_name: str  # ggml's own, e.g. "CUDA0", "RPC3"
    description: str
    type: str  # cpu | gpu | igpu | accel
    free: int
    total: int
    registry: str  # "CPU", "CUDA", "RPC[host:port]"
    host_buffer: bool = False  # has a pinned host buffer type (llama.cpp's CPU list puts it first)


def ggml_version() -> str:
    ffi, lib = native()
    return str(ffi.string(lib.ll_ggml_version()).decode())


def plugin_folder(root: Path | None = None) -> Path:
    """Where plugins for this core live: ``<backends>/<ggml version>/``."""
    from localllm import paths

    return (root or paths.backends()) / ggml_version()


def load_plugins(folder: Path | None = None) -> list[dict[str, Any]]:
    """Load every plugin in ``folder`` (default: this core's); one report per file."""
    from localllm.backends.cuda.runtime_wheels import preload as preload_runtime
    from localllm.backends.trust import why_unsafe

    ffi, lib = native()
    folder = folder or plugin_folder()
    reports = []
    files = sorted(folder.glob(f"libggml-*{PLUGIN_SUFFIX}")) if folder.is_dir() else []
    for path in files:
        key = str(path.resolve())
        if key not in _loaded:
            # The plugins folder is <backends>/<ggml version>/: from the backends folder
            # down, nothing may be writable by others (see backends/trust.py).
            # A pack's runtime wheels (cuBLAS, the CUDA runtime) are loaded first, from the
            # cache, so the plugin's own dlopen finds them by soname (runtime_wheels.py).
            refused = (
                why_unsafe(path, folder.parent)
                or _libs_refused(path, folder.parent)
                or preload_runtime(path)
            )
            if refused:
                _log.warning("backend plugin %s not loaded: %s", path.name, refused)
                _loaded[key] = {
                    "file": path.name,
                    "path": key,
                    "loaded": False,
                    "backend": "",
                    "error": refused,
                }
                reports.append(_loaded[key])
                continue
            take_log()
            name = ffi.new("char[]", 128)
            rc = lib.ll_backend_load(key.encode(), name, 128)
            log = take_log()
            if rc == 0:
                _loaded[key] = {
                    "file": path.name,
                    "path": key,
                    "loaded": True,
                    "backend": ffi.string(name).decode(),
                    "error": "",
                }
            else:
                _loaded[key] = {
                    "file": path.name,
                    "path": key,
                    "loaded": False,
                    "backend": "",
                    "error": _reason(log, path),
                }
        reports.append(_loaded[key])
    return reports


def _libs_refused(plugin: Path, backends_root: Path) -> str:
    """Why a library in ``plugin``'s ``<backend>-libs/`` folder must not be loaded, or "".

    Its runpath (``$ORIGIN/<backend>-libs``, pack.py) makes the loader take those
    libraries before the system's, so each is code that runs as the plugin does.
    """
    from localllm.backends.layout import libs_folder_of
    from localllm.backends.trust import why_unsafe

    libs = libs_folder_of(plugin)
    try:
        st = os.lstat(libs)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"refusing to load {plugin}: cannot check {libs}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"refusing to load {plugin}: {libs} is not a folder (a link, or a file)"
    # The folder itself: an empty one others can write is where a library gets planted.
    mode = stat.S_IMODE(st.st_mode)
    if hasattr(os, "geteuid") and st.st_uid not in (os.geteuid(), 0):
        return (
            f"refusing to load {plugin}: {libs} belongs to uid {st.st_uid}, not to you or "
            f"root: remove it and install the pack again"
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"refusing to load {plugin}: {libs} is writable by others than you "
            f"(mode {mode:o}): run 'chmod go-w {libs}'"
        )
    for lib in sorted(libs.iterdir()):
        why = why_unsafe(lib, backends_root)
        if why:
            return f"{why} (a library {plugin.name} loads from {libs.name}/)"
    return ""


def _reason(log: str, path: Path) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    if lines:
        return "; ".join(lines[-2:])
    return f"ggml refused {path.name} (not a ggml backend plugin for this core)"


def add_workers(endpoints: list[str]) -> list[dict[str, Any]]:
    """Register each RPC worker's devices (the RPC plugin must be loaded); one report each."""
    _, lib = native()
    reports = []
    for ep in endpoints:
        if ep in _workers:
            reports.append({"endpoint": ep, "devices": _workers[ep], "error": ""})
            continue
        why = reachable(ep, timeout=3.0)
        if why:
            reports.append(
                {"endpoint": ep, "devices": 0, "error": f"cannot connect to RPC worker {ep}: {why}"}
            )
            continue
        n = lib.ll_rpc_add_server(ep.encode())
        if n == -1:
            refused = [
                r["error"]
                for r in _loaded.values()
                if r["file"].startswith("libggml-rpc") and not r["loaded"]
            ]
            why = (
                f"the RPC backend plugin did not load: {refused[0]}"
                if refused
                else "the RPC backend plugin is not built: run 'localllm backends build rpc'"
            )
        elif n < 1:
            why = f"RPC worker {ep} offers no devices"
        else:
            _workers[ep] = n
        reports.append({"endpoint": ep, "devices": max(n, 0), "error": why})
    return reports


def devices() -> list[NativeDevice]:
    """Every device in the registry, with names that are the same in every process."""
    ffi, lib = native()
    name, desc, reg = ffi.new("char[]", 256), ffi.new("char[]", 512), ffi.new("char[]", 256)
    typ = ffi.new("int *")
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    raw = []
    for i in range(lib.ll_dev_count()):
        lib.ll_dev_reg_name(i, reg, 256)
        registry = ffi.string(reg).decode()
        # A remote device's memory is a round trip to its worker (and an abort if the
        # worker is gone); the daemon asks workers itself (hardware/rpc.py).
        remote = registry.startswith("RPC")
        free[0] = total[0] = 0
        if (
            lib.ll_dev_info(
                i,
                name,
                256,
                desc,
                512,
                typ,
                ffi.NULL if remote else free,
                ffi.NULL if remote else total,
            )
            != 0
        ):
            continue
        raw.append(
            (
                i,
                ffi.string(name).decode(),
                ffi.string(desc).decode(),
                _DEV_TYPES.get(typ[0], "accel"),
                int(free[0]),
                int(total[0]),
                registry,
            )
        )
    names = stable_names([(r[1], r[6], r[2]) for r in raw])
    return [
        NativeDevice(
            r[0], n, r[1], r[2], r[3], r[4], r[5], r[6], lib.ll_dev_has_host_buffer(r[0]) == 1
        )
        for r, n in zip(raw, names, strict=True)
    ]


def stable_names(devs: list[tuple[str, str, str]]) -> list[str]:
    """(ggml name, registry name, description) -> a name meaning the same device everywhere.

    ggml numbers RPC devices in the order servers were added in that process
    ("RPC0", "RPC1", ...) and describes each by its endpoint, so those become
    "RPC[host:port]" (and "#k" for a worker's k-th device); every other device
    keeps ggml's name.
    """
    seen: dict[str, int] = {}
    out = []
    for ggml_name, reg, desc in devs:
        if reg.startswith("RPC"):
            base = f"RPC[{desc}]"
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.append(base if k == 0 else f"{base}#{k}")
        else:
            out.append(ggml_name)
    return out


def resolve(names: list[str]) -> list[int]:
    """Registry indices of the named devices, in that order; a clear error for a missing one."""
    by_name = {d.name: d.index for d in devices()}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise LocalLLMError(
            f"device {', '.join(missing)} is not available in this process "
            f"(have: {', '.join(by_name) or 'none'})"
        )
    return [by_name[n] for n in names]


def local_offload_devices() -> list[int]:
    """Registry indices of this machine's GPUs and accelerators (what llama.cpp would use
    by default), leaving out RPC devices: a model only uses the workers it was planned on.

    LOCALLLM_LLM_LIBRARY keeps only its library's GPUs (``cpu``: none), as the planner
    does (scheduler/placement.py ``library_devices``): a GPU given to llama.cpp with no
    layers still takes the CPU's weights into its pinned host buffer and its compute.
    """
    library = config.LLM_LIBRARY.get()
    keep = config.LLM_LIBRARY_DEVICES.get(library, ()) if library else None
    return [
        d.index
        for d in devices()
        if d.type in ("gpu", "igpu", "accel")
        and not d.registry.startswith("RPC")
        and (keep is None or d.type == "accel" or library_of(d.ggml_name) in keep)
    ]


def prepare(workers: list[str] | None = None) -> dict[str, Any]:
    """Load this core's plugins and add ``workers``; what happened, for logs and reports."""
    plugins = load_plugins()
    added = add_workers(list(workers or [])) if workers else []
    return {"ggml_version": ggml_version(), "plugins": plugins, "workers": added}


def serve_rpc(endpoint: str, devices_: list[int], cache_dir: str | None, threads: int) -> int:
    """Serve registry devices ``devices_`` over ggml RPC; returns only when the server stops.

    cffi releases the GIL around the call, so a Python thread can run this while
    the main thread waits for signals.  -1: no RPC plugin; -2: bad device; 0: the
    server ended (it could not bind, or its accept loop failed).  Every client of
    the server can read and write this process's memory, and ``cache_dir`` (ggml's
    tensor cache, keyed by a 64-bit FNV-1a hash each client sends) is shared by all
    of them: the caller binds loopback unless told otherwise and passes only a
    folder no other user can write (``rpc_worker.check_cache_dir``).
    """
    ffi, lib = native()
    arr = ffi.new("int[]", devices_)
    cache = ffi.new("char[]", cache_dir.encode()) if cache_dir else ffi.NULL
    return int(lib.ll_rpc_start_server(endpoint.encode(), cache, threads, arr, len(devices_)))


def moe_cpu_patterns(n_cpu_moe: int) -> list[str]:
    """Tensor-name regexes that keep the experts of the first ``n_cpu_moe`` layers in RAM.

    The same tensors llama.cpp's ``--n-cpu-moe`` moves: a layer's gate/up/down
    expert weights (fused or not); attention and shared weights stay on the GPU.
    """
    if n_cpu_moe <= 0:
        return []
    layers = "|".join(str(i) for i in range(n_cpu_moe))
    return [rf"blk\.({layers})\.ffn_(up|down|gate|gate_up)_(ch|)exps"]


class Placement(TypedDict):
    """Where a model's weights go: ``Model``'s placement arguments, as ``place`` made them."""

    devices: list[int]
    split_mode: Literal["none", "layer", "row"]
    tensor_split: list[float]
    cpu_patterns: list[str]
    use_extra_bufts: bool


def place(opts: LoadOptions) -> Placement:
    """Plugins and RPC workers into the registry, then the planner's placement as load args
    (and whether the CPU's weights may go to its extra buffer types, ``opts.cpu_repack``).

    A worker that cannot be added fails the load with its name: placing its
    layers elsewhere would silently break the plan the daemon made.
    """
    ready = prepare(opts.rpc_workers)
    bad = [w for w in ready["workers"] if w["error"]]
    if bad:
        raise LocalLLMError("; ".join(w["error"] for w in bad))
    devices = resolve(opts.devices) if opts.devices else local_offload_devices()
    return {
        "devices": devices,
        "split_mode": opts.split_mode,
        "tensor_split": list(opts.tensor_split),
        "cpu_patterns": moe_cpu_patterns(opts.n_cpu_moe),
        "use_extra_bufts": cpu_check.prepare(opts.cpu_repack),
    }
