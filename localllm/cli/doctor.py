"""``localllm doctor``: what this machine and this build can run, and what to fix.

Runs locally, without the daemon: version and Python, the native module's
status and the llama.cpp build it was compiled for, the backend plugins
(loaded, or why not; for CUDA, where cuBLAS and the CUDA runtime come from,
and "no CUDA device" where no driver or GPU is), ggml's devices with free and
total memory, the RPC workers configured (reachable, devices, memory) and those
running here, CPU / RAM / ISA flags, the data paths, whether chat templates can be rendered (a
jinja2 older than 3.1.6 is refused: its sandbox can be escaped), and hints (a
GPU without its plugin and the one command that builds it; the jinja2 upgrade).
``--fix`` installs a verified prebuilt plugin (``backends get``) and builds only when
none fits.  ``--json`` prints the report as one object.  Exit
status 1 when the native module cannot load (nothing can run), else 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localllm.hardware.detect import Hardware


def register(sub: Any) -> None:
    parser = sub.add_parser("doctor", help="Check the native engine, devices and settings")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--fix", action="store_true", help="get (else build) the backend plugin the hardware wants"
    )
    parser.set_defaults(func=run)


def local_workers() -> list[dict[str, Any]]:
    """``localllm worker`` processes running here (their state files), live ones only."""
    import json as _json
    import os

    from localllm import paths

    out = []
    for f in sorted(paths.run_dir().glob("worker-*.json")) if paths.run_dir().is_dir() else []:
        try:
            info = _json.loads(f.read_text())
            os.kill(int(info["pid"]), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append(info)
    return out


def cuda_report(hw: Hardware) -> dict[str, str] | None:
    """Where the installed CUDA plugin takes cuBLAS and the CUDA runtime from, and its state
    ("no CUDA device" where no driver or GPU is); None when there is no CUDA plugin."""
    from localllm import paths
    from localllm.backends import catalog, cuda_runtime

    cuda = catalog.get("cuda")
    plugin = paths.backends() / hw.ggml_version / cuda.filename if hw.ggml_version else None
    if plugin is None or not plugin.is_file():
        return None
    rep: dict[str, Any] = next((p for p in hw.plugins if p.get("file") == plugin.name), {})
    devices = [d.name for d in hw.devices if d.library in cuda.libraries]
    return {
        "plugin": str(plugin),
        "runtime": cuda_runtime.describe(plugin),
        "state": cuda_runtime.explain(
            str(rep.get("error") or ""), bool(rep.get("loaded")), devices
        ),
    }


def collect() -> dict[str, Any]:
    """The whole report as plain data (what ``--json`` prints)."""
    from localllm import __version__, config, paths
    from localllm.backends.catalog import wanted_backends
    from localllm.backends.core import lib_dir as core_lib_dir
    from localllm.hardware.detect import detect
    from localllm.scheduler.repack import describe as describe_repack
    from localllm.template.jinja_version import jinja_problem, jinja_version

    hw = detect(refresh=True)
    jinja = jinja_problem()
    libraries = {d.library for d in hw.devices if d.is_gpu}
    wanted = [w for w in wanted_backends(hw.gpus_present, libraries) if w.command]
    return {
        "version": __version__,
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "native": {
            "ok": hw.native_ok,
            "error": hw.native_error,
            "build": hw.build_info,
            "system_info": hw.system_info,
            "core": str(core_lib_dir()),
        },
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
            }
            for g in hw.gpus_present
        ],
        "cpu": {
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
        },
        "paths": {
            "home": str(paths.home()),
            "models": str(paths.models()),
            "backends": str(paths.backends()),
        },
        "templates": {"jinja2": jinja_version(), "ok": jinja is None, "problem": jinja},
        "ggml_version": hw.ggml_version,
        "plugins": list(hw.plugins),
        "cuda": cuda_report(hw),
        "workers": [
            {
                "endpoint": w.endpoint,
                "state": w.state,
                "version": w.version,
                "error": w.error,
                "devices": [{"name": d.name, "free": d.free, "total": d.total} for d in w.devices],
            }
            for w in hw.workers
        ],
        "local_workers": local_workers(),
        "hints": list(hw.hints)
        + [
            f"localllm worker on {w['endpoint']} accepts connections from other hosts: "
            "ggml RPC has no authentication, so anyone who can reach it can read and write "
            "the worker's memory (remote code execution as its user); firewall it or use an "
            "SSH tunnel"
            for w in local_workers()
            if w.get("exposed")
        ]
        + ([jinja] if jinja else []),
        "fixes": [w.command for w in wanted],
        "ollama_settings": [
            {"setting": ours, "from": theirs} for ours, theirs in config.ollama_fallbacks()
        ],
    }


def render(report: dict[str, Any]) -> str:
    """The human-readable report."""
    from localllm.cli.output import table
    from localllm.scheduler.estimate import fmt_bytes

    py = report["python"]
    native = report["native"]
    lines = [
        f"localllm {report['version']}  (Python {py['version']}, {py['executable']})",
        f"Platform:   {report['platform']}",
    ]
    if native["ok"]:
        b = native["build"]
        llama = b.get("llama_version") or "unknown"
        via, source = b.get("llama_cpp_python"), b.get("source")
        if source == "core":  # built by the install, from that llama-cpp-python's sdist
            origin = f", core built from the llama-cpp-python {via} source" if via else ""
            where = f" (in {native['core']})" if native.get("core") else ""
        else:  # a prefix, or a module an older localllm built against llama-cpp-python
            origin = f" from llama-cpp-python {via}" if via else ""
            where = f" ({source})" if source not in (None, "", "llama-cpp-python") else ""
        lines.append(
            f"Native:     ok, llama.cpp {llama}{origin}{where}"
            + (", GPU offload" if b.get("gpu_offload") else ", CPU only build")
        )
        if native["system_info"]:
            lines.append(f"System:     {native['system_info']}")
    else:
        lines.append(f"Native:     NOT AVAILABLE: {native['error']}")
    templates = report["templates"]
    lines.append(
        f"Templates:  jinja2 {templates['jinja2']}, "
        + (
            "sandboxed"
            if templates["ok"]
            else "REFUSED: Jinja chat templates will not render (see hints)"
        )
    )
    rows = [
        (
            d["name"],
            d["kind"],
            d["library"],
            fmt_bytes(d["free"]),
            fmt_bytes(d["total"]),
            d["description"],
        )
        for d in report["devices"]
    ]
    lines += ["", "Devices the engine can use:"]
    lines += [
        "  " + ln
        for ln in table(
            ["NAME", "TYPE", "LIBRARY", "FREE", "TOTAL", "DESCRIPTION"], rows, gap=2
        ).splitlines()
    ]
    if report["plugins"]:
        lines += ["", f"Backend plugins (ggml {report['ggml_version']}):"]
        for p in report["plugins"]:
            state = f"loaded ({p['backend']})" if p["loaded"] else f"FAILED: {p['error']}"
            lines.append(f"  {p['file']}: {state}")
    if report.get("cuda"):
        c = report["cuda"]
        lines.append(f"CUDA runtime: {c['runtime']}" + (f"; {c['state']}" if c["state"] else ""))
    if report["workers"]:
        lines += ["", "RPC workers (LOCALLLM_RPC_WORKERS):"]
        for w in report["workers"]:
            devs = ", ".join(
                f"{d['name']} {fmt_bytes(d['free'])} free of {fmt_bytes(d['total'])}"
                for d in w["devices"]
            )
            detail = devs if w["state"] == "ready" else f"{w['error']} {devs}".strip()
            lines.append(f"  {w['endpoint']}: {w['state']}; {detail}")
    for w in report["local_workers"]:
        lines.append(
            f"Worker running here: {w['endpoint']} serving {', '.join(w.get('devices', []))}"
        )
    if report["gpus_present"]:
        lines += ["", "GPUs reported by drivers:"]
        for g in report["gpus_present"]:
            mem = f", {fmt_bytes(g['total'])}" if g["total"] else ""
            drv = f", driver {g['driver']}" if g["driver"] else ""
            lines.append(f"  {g['vendor']}: {g['name']}{drv}{mem}")
    cpu = report["cpu"]
    lines += [
        "",
        f"CPU:        {cpu['model']} ({cpu['arch']}), {cpu['physical_cores']} physical / "
        f"{cpu['logical_cores']} logical cores",
        f"RAM:        {fmt_bytes(cpu['available_ram'])} available of {fmt_bytes(cpu['total_ram'])}",
        f"ISA:        {' '.join(cpu['flags']) or '(none detected)'}",
        f"Repack:     LOCALLLM_CPU_REPACK={cpu['repack']}",
        "",
        f"Home:       {report['paths']['home']}",
        f"Models:     {report['paths']['models']}",
    ]
    for o in report["ollama_settings"]:
        lines.append(f"Setting:    {o['setting']} is taken from {o['from']} (Ollama's)")
    if report["hints"]:
        lines += ["", "Hints:"] + [f"  - {h}" for h in report["hints"]]
    return "\n".join(lines)


def fix(commands: list[str]) -> int:
    """Each build command, after ``backends get`` of the same plugin failed: a verified
    prebuilt pack takes seconds, a build minutes to an hour (DESIGN §3)."""
    from localllm import children

    for cmd in commands:
        name = cmd.split()[-1]
        print(f"Running: localllm backends get {name}", flush=True)
        # Through the one child helper: this same localllm, whatever the working folder.
        if children.run("localllm.cli.main", "backends", "get", name).returncode == 0:
            continue
        print(f"No prebuilt {name} plugin was installed (see above); building it instead.")
        print(f"Running: {cmd}", flush=True)
        if children.run("localllm.cli.main", *cmd.split()[1:]).returncode != 0:
            return 1
    return 0


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.fix:
        if not report["fixes"]:
            print("Nothing to fix: every GPU found has a loaded backend.")
        if fix(report["fixes"]) != 0:
            return 1
        report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    return 0 if report["native"]["ok"] else 1
