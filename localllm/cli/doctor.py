"""``localllm doctor``: what this machine and this build can run, and what to fix.

Runs locally, without the daemon: version and Python, the native module's
status and the llama.cpp build it was compiled for, ggml's devices with free
and total memory, CPU / RAM / ISA flags, the data paths, and hints (a GPU the
build cannot use and how to rebuild for it).  ``--json`` prints the same as
one object.  Exit status 1 when the native module cannot load (nothing can
run), else 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("doctor", help="Check the native engine, devices and settings")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def collect() -> dict[str, Any]:
    """The whole report as plain data (what ``--json`` prints)."""
    from localllm import __version__, paths
    from localllm.hardware.detect import detect

    hw = detect(refresh=True)
    return {
        "version": __version__,
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "native": {"ok": hw.native_ok, "error": hw.native_error, "build": hw.build_info,
                   "system_info": hw.system_info},
        "devices": [
            {"name": d.name, "description": d.description, "kind": d.kind,
             "library": d.library, "free": d.free, "total": d.total}
            for d in hw.devices
        ],
        "gpus_present": [
            {"vendor": g.vendor, "name": g.name, "driver": g.driver, "total": g.total,
             "free": g.free}
            for g in hw.gpus_present
        ],
        "cpu": {"model": hw.cpu.model, "arch": hw.cpu.arch,
                "physical_cores": hw.cpu.physical_cores, "logical_cores": hw.cpu.logical_cores,
                "total_ram": hw.cpu.total_ram, "available_ram": hw.cpu.available_ram,
                "flags": list(hw.cpu.flags)},
        "paths": {"home": str(paths.home()), "models": str(paths.models())},
        "hints": list(hw.hints),
    }


def render(report: dict[str, Any]) -> str:
    """The human-readable report."""
    from localllm.cli.output import table
    from localllm.scheduler.estimate import fmt_bytes

    py = report["python"]
    native = report["native"]
    lines = [f"localllm {report['version']}  (Python {py['version']}, {py['executable']})",
             f"Platform:   {report['platform']}"]
    if native["ok"]:
        b = native["build"]
        llama = b.get("llama_version") or "unknown"
        via = b.get("llama_cpp_python")
        lines.append(f"Native:     ok, llama.cpp {llama}"
                     + (f" from llama-cpp-python {via}" if via else "")
                     + (f" ({b['source']})" if b.get("source") not in (None, "",
                                                                       "llama-cpp-python") else "")
                     + (", GPU offload" if b.get("gpu_offload") else ", CPU only build"))
        if native["system_info"]:
            lines.append(f"System:     {native['system_info']}")
    else:
        lines.append(f"Native:     NOT AVAILABLE: {native['error']}")
    rows = [(d["name"], d["kind"], d["library"], fmt_bytes(d["free"]), fmt_bytes(d["total"]),
             d["description"]) for d in report["devices"]]
    lines += ["", "Devices the engine can use:"]
    lines += ["  " + ln for ln in table(["NAME", "TYPE", "LIBRARY", "FREE", "TOTAL",
                                         "DESCRIPTION"], rows, gap=2).splitlines()]
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
        f"RAM:        {fmt_bytes(cpu['available_ram'])} available of "
        f"{fmt_bytes(cpu['total_ram'])}",
        f"ISA:        {' '.join(cpu['flags']) or '(none detected)'}",
        "",
        f"Home:       {report['paths']['home']}",
        f"Models:     {report['paths']['models']}",
    ]
    if report["hints"]:
        lines += ["", "Hints:"] + [f"  - {h}" for h in report["hints"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    return 0 if report["native"]["ok"] else 1
