"""Child entry point: ``python -m localllm.hardware.probe`` prints the native view as JSON.

This is the only place in hardware/ that imports the native binding, and it
runs in its own process: a crash while ggml initialises its backends (a bad
driver, a missing CUDA runtime) kills this child, never the daemon.  It always
prints exactly one JSON object on stdout::

    {"ok": true, "devices": [...], "system_info": "...", "build_info": {...}}
    {"ok": false, "error": "ImportError: ..."}
"""

from __future__ import annotations

import dataclasses
import json
import sys
import traceback
from typing import Any


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return dict(obj)


def collect() -> dict[str, Any]:
    """Ask the native binding for its devices, system info and build info."""
    try:
        from localllm.engine import binding
    except Exception as exc:  # any failure to load the module is a status to report
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    try:
        devices = [_as_dict(d) for d in binding.devices()]
        return {
            "ok": True,
            "devices": devices,
            "system_info": str(binding.system_info()),
            "build_info": binding.build_info(),
        }
    except Exception as exc:
        tail = traceback.format_exc(limit=3)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": tail}


def main() -> int:
    result = collect()
    # default=str: build_info may hold values json cannot encode; a lossy string beats a crash.
    sys.stdout.write(json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
