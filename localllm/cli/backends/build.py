"""``localllm backends build NAME``: compile a plugin here, with live progress.

The build itself is ``backends/build.py``; this module words it for a person:
the phases and ``[n/m]`` progress on the terminal (a line per 10% in a log),
the notes (what is installed, what is downloaded and how big), the question
before NVIDIA's toolkit is downloaded (``--yes`` answers it), and at the end
the proof that the plugin loads (``common.prove_loads``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from localllm.cli.backends.common import prove_loads


def register(verbs: Any) -> None:
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
