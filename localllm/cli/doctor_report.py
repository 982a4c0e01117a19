"""``localllm doctor``'s report as data: what ``--json`` prints and ``render`` reads.

Gathered locally, without the daemon: the native module and its build, ggml's
devices, the GPUs the drivers report, the plugins the probe tried (and where
the CUDA plugin's runtime comes from), the RPC workers configured and those
running here, CPU and RAM, the data paths, the template engine, the advice
(``backends/advice.py``) and the Ollama settings taken over.
"""

from __future__ import annotations

import platform
import sys
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from localllm.hardware.detect import Hardware
    from localllm.hardware.probe_answer import BuildInfo, PluginReport


class Python(TypedDict):
    version: str
    executable: str


class Native(TypedDict):
    ok: bool
    error: str
    build: BuildInfo
    system_info: str
    core: str  # the folder of the core's libraries


class DeviceRow(TypedDict):
    name: str
    description: str
    kind: str
    library: str
    free: int
    total: int


class GPUPresent(TypedDict):
    vendor: str
    name: str
    driver: str
    total: int
    free: int
    integrated: bool


class CPU(TypedDict):
    model: str
    arch: str
    physical_cores: int
    logical_cores: int
    total_ram: int
    available_ram: int
    flags: list[str]
    repack: str


class Templates(TypedDict):
    jinja2: str
    ok: bool
    problem: str | None


class WorkerDevice(TypedDict):
    name: str
    free: int
    total: int


class Worker(TypedDict):
    endpoint: str
    state: str
    version: str
    error: str
    devices: list[WorkerDevice]


class LocalWorker(TypedDict, total=False):
    """A ``localllm worker`` state file (``engine/rpc_worker.py``)."""

    pid: int
    endpoint: str
    devices: list[str]
    exposed: bool


class Report(TypedDict):
    version: str
    python: Python
    platform: str
    native: Native
    devices: list[DeviceRow]
    gpus_present: list[GPUPresent]
    cpu: CPU
    paths: dict[str, str]
    templates: Templates
    ggml_version: str
    plugins: list[PluginReport]
    cuda: dict[str, str] | None
    workers: list[Worker]
    local_workers: list[LocalWorker]
    hints: list[str]
    fixes: list[str]  # the commands of advice.wanted, in order
    ollama_settings: list[dict[str, str]]


def local_workers() -> list[LocalWorker]:
    """``localllm worker`` processes running here (their state files), live ones only."""
    import json
    import os

    from localllm import paths

    out = []
    for f in sorted(paths.run_dir().glob("worker-*.json")) if paths.run_dir().is_dir() else []:
        try:
            info = json.loads(f.read_text())
            os.kill(int(info["pid"]), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append(info)  # as the worker wrote it (engine/rpc_worker.py)
    return out


def cuda_report(hw: Hardware) -> dict[str, str] | None:
    """Where the installed CUDA plugin takes cuBLAS and the CUDA runtime from, and its state
    ("no CUDA device" where no driver or GPU is); None when there is no CUDA plugin."""
    from localllm import paths
    from localllm.backends import catalog
    from localllm.backends.cuda import runtime as cuda_runtime

    cuda = catalog.get("cuda")
    plugin = paths.backends() / hw.ggml_version / cuda.filename if hw.ggml_version else None
    if plugin is None or not plugin.is_file():
        return None
    rep = next((p for p in hw.plugins if p.get("file") == plugin.name), None) or {}
    devices = [d.name for d in hw.devices if d.library in cuda.libraries]
    return {
        "plugin": str(plugin),
        "runtime": cuda_runtime.describe(plugin),
        "state": cuda_runtime.explain(
            str(rep.get("error") or ""), bool(rep.get("loaded")), devices
        ),
    }


def collect() -> Report:
    """The whole report as plain data (what ``--json`` prints)."""
    from localllm import __version__, config, paths
    from localllm.backends import advice
    from localllm.hardware.detect import detect
    from localllm.template.jinja_version import jinja_problem, jinja_version

    hw = detect(refresh=True)
    jinja = jinja_problem()
    here = local_workers()
    return {
        "version": __version__,
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "native": _native(hw),
        "devices": [
            {
                "name": d.name,
                "description": d.description,
                "kind": d.kind,
                "library": d.library,
                "free": d.free,
                "total": d.total,
            }
            for d in hw.devices
        ],
        "gpus_present": [
            {
                "vendor": g.vendor,
                "name": g.name,
                "driver": g.driver,
                "total": g.total,
                "free": g.free,
                "integrated": g.integrated,
            }
            for g in hw.gpus_present
        ],
        "cpu": _cpu(hw),
        "paths": {
            "home": str(paths.home()),
            "models": str(paths.models()),
            "backends": str(paths.backends()),
        },
        "templates": {"jinja2": jinja_version(), "ok": jinja is None, "problem": jinja},
        "ggml_version": hw.ggml_version,
        "plugins": list(hw.plugins),
        "cuda": cuda_report(hw),
        "workers": _workers(hw),
        "local_workers": here,
        "hints": [*advice.hints(hw), *_exposed_workers(here)] + ([jinja] if jinja else []),
        "fixes": [w.command for w in advice.wanted(hw) if w.command],
        "ollama_settings": [
            {"setting": ours, "from": theirs} for ours, theirs in config.ollama_fallbacks()
        ],
    }


def _native(hw: Hardware) -> Native:
    from localllm.backends.core import lib_dir as core_lib_dir

    return {
        "ok": hw.native_ok,
        "error": hw.native_error,
        "build": hw.build_info,
        "system_info": hw.system_info,
        "core": str(core_lib_dir()),
    }


def _cpu(hw: Hardware) -> CPU:
    from localllm import config
    from localllm.scheduler.repack import describe as describe_repack

    return {
        "model": hw.cpu.model,
        "arch": hw.cpu.arch,
        "physical_cores": hw.cpu.physical_cores,
        "logical_cores": hw.cpu.logical_cores,
        "total_ram": hw.cpu.total_ram,
        "available_ram": hw.cpu.available_ram,
        "flags": list(hw.cpu.flags),
        "repack": describe_repack(
            config.CPU_REPACK.get(), next((d for d in hw.devices if d.kind == "cpu"), None)
        ),
    }


def _workers(hw: Hardware) -> list[Worker]:
    return [
        {
            "endpoint": w.endpoint,
            "state": w.state,
            "version": w.version,
            "error": w.error,
            "devices": [{"name": d.name, "free": d.free, "total": d.total} for d in w.devices],
        }
        for w in hw.workers
    ]


def _exposed_workers(here: list[LocalWorker]) -> list[str]:
    return [
        f"localllm worker on {w['endpoint']} accepts connections from other hosts: "
        "ggml RPC has no authentication, so anyone who can reach it can read and write "
        "the worker's memory (remote code execution as its user); firewall it or use an "
        "SSH tunnel"
        for w in here
        if w.get("exposed")
    ]
