"""What every ``localllm backends`` verb shares: the report, ``list``, ``remove``, and the proof.

``report`` runs the hardware probe (a child process that loads every plugin)
and sets each backend of the catalogue against it; ``list`` shows it; a CUDA
plugin that cannot load for want of a driver or GPU says "no CUDA device"
(``backends/cuda/runtime.py``).  ``prove_loads`` ends ``build``, ``install``
and ``get``: the plugin loads in a child process as in every runner, and a
running daemon is told (``tell_daemon``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from localllm.cli.tell_daemon import tell_daemon


def report() -> dict[str, Any]:
    from localllm.backends.cuda.runtime import explain
    from localllm.backends.installed import rows, strays
    from localllm.hardware.detect import detect

    hw = detect(refresh=True)
    backends = [r.to_dict() for r in rows(hw)]
    for b in backends:
        if b["name"] == "cuda" and b["built"]:
            b["error"] = explain(b["error"], b["loaded"], b["devices"])
    return {
        "ggml_version": hw.ggml_version,
        "native_ok": hw.native_ok,
        "native_error": hw.native_error,
        "backends": backends,
        "strays": strays(hw),
    }


def run_list(args: argparse.Namespace) -> int:
    from localllm import paths
    from localllm.backends.cuda.runtime import no_device
    from localllm.cli.output import table
    from localllm.format import format_bytes

    rep = report()
    if args.json:
        # One list: the backends, then any stray file as a row flagged "stray".
        strays = [
            {
                "name": Path(s["path"]).name,
                "stray": True,
                "built": False,
                "loaded": False,
                "path": s["path"],
                "error": s["reason"],
            }
            for s in rep["strays"]
        ]
        print(json.dumps(rep["backends"] + strays, indent=2))
        return 0
    if not rep["native_ok"]:
        print(f"Native module not usable: {rep['native_error']}", file=sys.stderr)
    print(
        f"Core: ggml {rep['ggml_version'] or 'unknown'}; plugins in "
        f"{paths.backends() / (rep['ggml_version'] or '<ggml version>')}"
    )
    rows = []
    for b in rep["backends"]:
        state = (
            "no device"
            if no_device(b["error"])
            else "loaded"
            if b["loaded"]
            else "FAILED"
            if b["built"] and b["error"]
            else "built"
            if b["built"]
            else "not built"
        )
        rows.append(
            (
                b["name"],
                state,
                ", ".join(b["devices"]) or "-",
                format_bytes(b["size"]) if b["size"] else "-",
                "yes" if b["wanted"] else "",
                b["error"] or _where(b) or b["needs"],
            )
        )
    print(table(["NAME", "STATE", "DEVICES", "SIZE", "WANTED", "DETAIL"], rows, gap=2))
    for s in rep["strays"]:
        print(f"  ! {s['path']}: {s['reason']}")
    return 0


def _where(row: dict[str, Any]) -> str:
    """The plugin's path, and the pack it came from when it was not built here."""
    path: str = row["path"]
    return path + (f" (from {row['pack']})" if path and row["pack"] else "")


def prove_loads(backend: str, plugin: Path, done: str) -> int:
    """Whether a plugin just ``done`` (built, installed) loads, in a child process like
    every runner does: what it found said, and the exit status."""
    rep = {r["name"]: r for r in report()["backends"]}[backend]
    if backend == "cuda":
        from localllm.backends.cuda.runtime import describe, no_device

        print(f"CUDA runtime: {describe(plugin)}")
        if no_device(rep["error"]):
            # Done right, on a machine that cannot run it (a builder for others, CI).
            print(f"On this machine: {rep['error']}.")
            return 0
    if not rep["loaded"]:
        print(f"The plugin was {done} but does not load: {rep['error']}", file=sys.stderr)
        return 1
    devs = ", ".join(rep["devices"])
    print(f"Loaded: {devs or 'no local devices (RPC devices come from workers)'}")
    tell_daemon(f"new {backend}")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from localllm.backends.installed import remove

    gone = remove(args.name)
    if not gone:
        print(f"No {args.name} plugin is installed.", file=sys.stderr)
        return 1
    for p in gone:
        print(f"Removed {p}")
    tell_daemon(f"removed {args.name}")
    return 0
