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
from typing import Any

from localllm.cli.doctor_report import Report, collect


def register(sub: Any) -> None:
    parser = sub.add_parser("doctor", help="Check the native engine, devices and settings")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--fix", action="store_true", help="get (else build) the backend plugin the hardware wants"
    )
    parser.set_defaults(func=run)


def render(report: Report) -> str:
    """The human-readable report."""
    py = report["python"]
    lines = [
        f"localllm {report['version']}  (Python {py['version']}, {py['executable']})",
        f"Platform:   {report['platform']}",
        *_render_native(report),
        *_render_devices(report),
        *_render_workers(report),
        *_render_machine(report),
    ]
    if report["hints"]:
        lines += ["", "Hints:"] + [f"  - {h}" for h in report["hints"]]
    return "\n".join(lines)


def _render_native(report: Report) -> list[str]:
    native = report["native"]
    lines = []
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
    return lines


def _render_devices(report: Report) -> list[str]:
    """ggml's devices, the plugins the probe tried, where CUDA's runtime comes from."""
    from localllm.cli.output import table
    from localllm.scheduler.estimate import fmt_bytes

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
    lines = ["", "Devices the engine can use:"]
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
    c = report["cuda"]
    if c:
        lines.append(f"CUDA runtime: {c['runtime']}" + (f"; {c['state']}" if c["state"] else ""))
    return lines


def _render_workers(report: Report) -> list[str]:
    """RPC workers configured and running here, and the GPUs the drivers report."""
    from localllm.scheduler.estimate import fmt_bytes

    lines = []
    if report["workers"]:
        lines += ["", "RPC workers (LOCALLLM_RPC_WORKERS):"]
        for w in report["workers"]:
            devs = ", ".join(
                f"{d['name']} {fmt_bytes(d['free'])} free of {fmt_bytes(d['total'])}"
                for d in w["devices"]
            )
            detail = devs if w["state"] == "ready" else f"{w['error']} {devs}".strip()
            lines.append(f"  {w['endpoint']}: {w['state']}; {detail}")
    for here in report["local_workers"]:
        lines.append(
            f"Worker running here: {here.get('endpoint')} serving "
            + ", ".join(here.get("devices", []))
        )
    if report["gpus_present"]:
        lines += ["", "GPUs reported by drivers:"]
        for g in report["gpus_present"]:
            mem = f", {fmt_bytes(g['total'])}" if g["total"] else ""
            drv = f", driver {g['driver']}" if g["driver"] else ""
            shared = ", shares system RAM" if g.get("integrated") else ""
            lines.append(f"  {g['vendor']}: {g['name']}{drv}{mem}{shared}")
    return lines


def _render_machine(report: Report) -> list[str]:
    """CPU, RAM, the data paths and the Ollama settings taken over."""
    from localllm.scheduler.estimate import fmt_bytes

    cpu = report["cpu"]
    lines = [
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
    return lines


def fix(commands: list[str]) -> int:
    """For each plugin a fix names: ``backends get`` first, ``backends build`` when that
    fails: a verified prebuilt pack takes seconds, a build minutes to an hour (DESIGN §3)."""
    from localllm import children

    for cmd in commands:
        name = cmd.split()[-1]
        print(f"Running: localllm backends get {name}", flush=True)
        # Through the one child helper: this same localllm, whatever the working folder.
        if children.run("localllm.cli.main", "backends", "get", name).returncode == 0:
            continue
        print(f"No prebuilt {name} plugin was installed (see above); building it instead.")
        print(f"Running: localllm backends build {name}", flush=True)
        if children.run("localllm.cli.main", "backends", "build", name).returncode != 0:
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
