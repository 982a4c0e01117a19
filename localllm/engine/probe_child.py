"""Child entry point: ``python -m localllm.engine.probe_child`` prints the native view as JSON.

``hardware.detect`` starts it by module name and reads its answer: hardware/
sits below the engine and imports none of it, and this child, like a runner,
loads the native module in its own process, so a crash while ggml initialises
its backends (a bad driver, a missing CUDA runtime, a broken plugin) kills this
child, never the daemon.  Before listing devices it loads the backend plugins
built for this core and adds the RPC workers named with ``--rpc host:port``,
exactly as a runner does before a load, so what it reports is what a runner
will see.  It always prints exactly one JSON object on stdout::

    {"ok": true, "devices": [...], "plugins": [...], "workers": [...],
     "ggml_version": "...", "system_info": "...", "build_info": {...},
     "cpu_buffers": [{"name": "AMX", "rules": [...]}, ...]}

``cpu_buffers`` are the CPU backend's extra buffer types and the weights each
takes (cpu_buffers.py): the planner counts the repacked copies llama.cpp
keeps there.  With LOCALLLM_CPU_REPACK=auto each also says whether auto lets a
load use it (``"auto"``) and what the self-test found (``"fault"``, "" when it
works; cpu_check.py runs it in throwaway children, once per boot).
    {"ok": false, "error": "ImportError: ..."}
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import traceback


def collect(workers: list[str] | None = None) -> dict[str, object]:
    """Ask the native binding for its devices, plugins, system info and build info."""
    try:
        from localllm import config
        from localllm.engine import binding, cpu_buffers, cpu_check, plugins
    except Exception as exc:  # any failure to load the module is a status to report
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    try:
        binding.native()
        prepared = plugins.prepare(workers)
        devices = [dataclasses.asdict(d) for d in plugins.devices()]
        return {
            "ok": True,
            "devices": devices,
            **prepared,
            "system_info": str(binding.system_info()),
            "build_info": binding.build_info(),
            "cpu_buffers": cpu_check.annotate(cpu_buffers.extra_buffers(), config.CPU_REPACK.get()),
        }
    except Exception as exc:
        tail = traceback.format_exc(limit=3)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": tail}


def main(argv: list[str] | None = None) -> int:
    from localllm.children import adopt

    adopt()
    parser = argparse.ArgumentParser(prog="python -m localllm.engine.probe_child")
    parser.add_argument("--rpc", action="append", default=[], help="RPC worker host:port")
    args = parser.parse_args(argv)
    result = collect(args.rpc)
    # default=str: build_info may hold values json cannot encode; a lossy string beats a crash.
    sys.stdout.write(json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
