"""``localllm backends list|build|remove`` (and ``pack|install|get``): this machine's plugins.

``list`` runs the hardware probe (a child process that loads every plugin)
and shows each backend: built, loaded, its devices, or why it did not load
(a plugin others could have written is refused, with the fix), plus stray
files in the backends folder; a CUDA plugin that cannot load for want of a
driver or GPU says "no CUDA device" (``backends/cuda_runtime.py``).  ``build``
compiles one plugin from the pinned llama.cpp source with live progress (see
``backends/build.py``); a CUDA build without a toolkit asks before it downloads
NVIDIA's from the package index (``--yes`` answers for it).
``remove`` deletes a plugin; ``pack``, ``install`` and ``get`` (prebuilt, verified
plugins) live in ``backend_packs``.  None of them needs the daemon; a running one is
told when a plugin is built, installed or removed (``tell_daemon``: SIGHUP), probes
its devices again and plans the next model load with them, with no restart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from localllm.cli.tell_daemon import tell_daemon


def register(sub: Any) -> None:
    parser = sub.add_parser("backends", help="List, build, get or remove GPU/RPC backend plugins")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    ls = verbs.add_parser("list", help="Show every backend: built, loaded, devices")
    ls.add_argument("--json", action="store_true", help="print the list as JSON")
    ls.set_defaults(func=run_list)
    b = verbs.add_parser("build", help="Build a plugin from the pinned llama.cpp source")
    b.add_argument("name", help="cuda, vulkan, rocm or rpc")
    b.add_argument(
        "--arch", help="GPU architectures (CUDA: 89,90; ROCm: gfx1100); default: the GPUs present"
    )
    b.add_argument("--jobs", "-j", type=int, default=0, help="parallel compile jobs")
    b.add_argument(
        "--source",
        type=Path,
        help="a llama-cpp-python sdist (or trimmed copy) "
        "to build from instead of downloading it "
        "(needed when the installed version has no "
        "pinned sha256)",
    )
    b.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="TARGET",
        help="extra cmake targets to build in the same tree (e.g. llama-bench)",
    )
    b.add_argument(
        "--cuda",
        metavar="VERSION",
        help="CUDA version (13 or 13.0) of NVIDIA's compiler from the package index,"
        " used when no nvcc is found; default: what the driver supports",
    )
    b.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="download what the build needs (NVIDIA's CUDA compiler and libraries, "
        "about 530 MB) without asking",
    )
    b.set_defaults(func=run_build)
    rm = verbs.add_parser("remove", help="Delete a plugin (and the libraries its pack brought)")
    rm.add_argument("name")
    rm.set_defaults(func=run_remove)
    from localllm.cli import backend_packs  # pack, install, get: prebuilt plugins

    backend_packs.register(verbs)
    parser.set_defaults(func=lambda args: (parser.print_help(), 0)[1])


def report() -> dict[str, Any]:
    from localllm.backends.cuda_runtime import explain
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
    from localllm.backends.cuda_runtime import no_device
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


def run_build(args: argparse.Namespace) -> int:
    from localllm.backends.build import build
    from localllm.hardware.detect import detect

    core = detect().ggml_version
    last = {"phase": "", "shown": -1}
    tty = sys.stderr.isatty()

    def progress(phase: str, done: int, total: int) -> None:
        if phase != last["phase"]:
            if last["phase"]:
                sys.stderr.write("\n")
            last["phase"], last["shown"] = phase, -1
            sys.stderr.write(
                {
                    "toolkit": "Downloading NVIDIA's CUDA wheels...",
                    "unpack": "Unpacking them...",
                    "source": "Getting the llama.cpp source...",
                    "configure": "Configuring...",
                    "build": "Building...",
                }.get(phase, phase)
            )
        if phase == "toolkit" and total and tty:
            sys.stderr.write(f"\rDownloading NVIDIA's CUDA wheels [{done}/{total}]")
        if phase == "build" and total:
            pct = 100 * done // total
            if tty:
                sys.stderr.write(f"\rBuilding [{done}/{total}] {pct}%")
            elif pct // 10 != last["shown"]:  # a log, not a screen: a line per 10%
                last["shown"] = pct // 10
                sys.stderr.write(f"\n  [{done}/{total}] {pct}%")
        sys.stderr.flush()

    def notice(text: str) -> None:
        sys.stderr.write(f"Note: {text}\n")
        sys.stderr.flush()

    result = build(
        args.name,
        arch=args.arch,
        jobs=args.jobs,
        source_file=args.source,
        also=tuple(args.also),
        core_ggml=core,
        cuda=args.cuda,
        progress=progress,
        notice=notice,
        confirm=lambda text: confirm(args.yes),
    )
    sys.stderr.write("\n")
    print(
        f"Built {result.backend} for ggml {result.ggml_version} in {result.seconds:.1f} s: "
        f"{result.path} ({result.size / 1e6:.1f} MB); log: {result.log}"
    )
    return prove_loads(result.backend, result.path, "built")


def prove_loads(backend: str, plugin: Path, done: str) -> int:
    """Whether a plugin just ``done`` (built, installed) loads, in a child process like
    every runner does: what it found said, and the exit status."""
    rep = {r["name"]: r for r in report()["backends"]}[backend]
    if backend == "cuda":
        from localllm.backends.cuda_runtime import describe, no_device

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


def confirm(yes: bool) -> bool:
    """The answer to a download the build described (in a note just printed): ``--yes``, or
    the user's at a terminal; elsewhere no (a script must say --yes)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        return False
    try:
        answer = input("Download it and build? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


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
