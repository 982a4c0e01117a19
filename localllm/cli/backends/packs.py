"""``localllm backends pack|install|get``: prebuilt plugins, made here or fetched and verified.

``pack NAME`` writes one file with the installed plugin, the runtime
libraries it needs and a manifest (``backends/pack.py``), and prints its
sha256 and the line that puts it in the table a release ships.  ``install
FILE|URL`` and ``get NAME`` (from ``LOCALLLM_BACKENDS_REPO``) install a pack
only when its sha256 is in that table or given with ``--trust`` and it fits
this core and these GPUs (``backends/install.py``, ``backends/get.py``); then,
like ``build``, they prove that the plugin loads, in a child process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from localllm.cli.backends.common import prove_loads

_TRUST_HELP = (
    "the sha256 of a pack that is not in this release's table, to install it "
    "anyway (the refusal prints it): only for a pack you know the origin of"
)
_WHEELS_HELP = (
    "a folder with the NVIDIA runtime wheels a CUDA pack names (for machines without the "
    "package index), or a Python environment's site-packages that has them installed"
)
_ARCH_HELP = "GPU architectures to match (CUDA: 89,90; ROCm: gfx1100); default: the GPUs here"


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "pack",
        help="Write an installed plugin, its libraries and a manifest "
        "to one file for other machines",
    )
    p.add_argument("name", help="cuda, vulkan, rocm or rpc")
    p.add_argument(
        "--output", "-o", type=Path, help="file or folder to write (default: the working folder)"
    )
    p.add_argument(
        "--arch",
        help="the GPU architectures the plugin was built for, when its "
        "build tree is gone and cannot say",
    )
    p.set_defaults(func=run_pack)
    i = verbs.add_parser("install", help="Install a plugin pack from a file or URL")
    i.add_argument("pack", help="a pack file, or an http(s) URL of one")
    i.add_argument("--trust", metavar="SHA256", help=_TRUST_HELP)
    i.add_argument("--wheels", metavar="DIR", type=Path, help=_WHEELS_HELP)
    i.add_argument("--arch", help=_ARCH_HELP)
    i.set_defaults(func=run_install)
    g = verbs.add_parser(
        "get", help="Download and install the prebuilt plugin pack that fits this machine"
    )
    g.add_argument("name", help="cuda, vulkan, rocm or rpc")
    g.add_argument("--repo", help="Hugging Face repo of packs (default: LOCALLLM_BACKENDS_REPO)")
    g.add_argument("--trust", metavar="SHA256", help=_TRUST_HELP)
    g.add_argument("--wheels", metavar="DIR", type=Path, help=_WHEELS_HELP)
    g.add_argument("--arch", help=_ARCH_HELP)
    g.set_defaults(func=run_get)


def _core(args: argparse.Namespace) -> Any:
    from localllm.backends.manifest import Core
    from localllm.hardware.detect import detect

    hw = detect(refresh=True)
    archs = [a.strip() for a in args.arch.split(",") if a.strip()] if args.arch else None
    return Core(hw.ggml_version, str(hw.build_info.get("ggml_commit") or ""), archs)


def _progress() -> Any:
    last = {"pct": -1}
    tty = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        pct = 100 * done // total if total else 0
        if tty:
            sys.stderr.write(f"\rDownloading {done / 1e6:.1f} / {total / 1e6:.1f} MB {pct}%")
        elif pct // 10 != last["pct"]:
            last["pct"] = pct // 10
            sys.stderr.write(f"  {pct}%\n")
        sys.stderr.flush()

    return show


def _end_progress() -> None:
    if sys.stderr.isatty():  # the progress line was rewritten in place: end it
        sys.stderr.write("\n")


def run_pack(args: argparse.Namespace) -> int:
    from localllm.backends.pack import make
    from localllm.hardware.detect import detect

    hw = detect(refresh=True)
    packed = make(
        args.name,
        ggml_version=hw.ggml_version,
        ggml_commit=str(hw.build_info.get("ggml_commit") or ""),
        out=args.output,
        arch=args.arch,
    )
    m = packed.manifest
    archs = ", ".join(m["architectures"]) or "any"
    print(
        f"Packed {m['backend']} for ggml {m['ggml_version']} ({m['platform']}, architectures "
        f"{archs}, toolkit {m['toolkit'] or 'unknown'}): {packed.path} "
        f"({packed.size / 1e6:.1f} MB)"
    )
    for name, entry in m["files"].items():
        print(f"  {name}  {entry['size']} bytes  sha256 {entry['sha256']}")
    for w in m["runtime"]["wheels"] if "runtime" in m else []:
        print(
            f"  runtime wheel {w['name']} {w['version']} (sha256 {w['sha256']}): "
            f"{', '.join(w['libs'])}, fetched once by 'backends install'"
        )
    if m["system_libs"]:
        print(f"  needs from the system: {', '.join(m['system_libs'])}")
    print(f"sha256 {packed.sha256}")
    print(
        f"Install elsewhere with: localllm backends install {packed.path.name} "
        f"--trust {packed.sha256}"
    )
    print(
        "Or list it in localllm/backends/trusted.toml:\n"
        f'    {{ file = "{packed.path.name}", sha256 = "{packed.sha256}" }},'
    )
    return 0


def _loaded(installed: Any) -> int:

    m = installed.manifest
    print(
        f"Installed {m['backend']} for ggml {m['ggml_version']} (trusted by "
        f"{installed.trusted_by}, sha256 {installed.sha256}): {installed.plugin}"
    )
    for line in installed.runtime:
        print(f"  runtime {line}")
    return prove_loads(installed.backend, installed.plugin, "installed")


def run_install(args: argparse.Namespace) -> int:
    from localllm.backends.get import fetch_url
    from localllm.backends.install import install

    core = _core(args)
    if args.pack.startswith(("http://", "https://")):
        try:
            path = fetch_url(args.pack, _progress())
        finally:
            _end_progress()
        try:
            done = install(path, core, trust_arg=args.trust, origin=args.pack, wheels=args.wheels)
        finally:
            path.unlink(missing_ok=True)
    else:
        path = Path(args.pack).expanduser()
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            return 1
        done = install(path, core, trust_arg=args.trust, wheels=args.wheels)
    return _loaded(done)


def run_get(args: argparse.Namespace) -> int:
    from localllm.backends.get import get

    def notice(text: str) -> None:
        sys.stderr.write(f"{text[0].upper()}{text[1:]}\n")

    try:
        done = get(
            args.name,
            _core(args),
            repo=args.repo,
            trust_arg=args.trust,
            wheels=args.wheels,
            progress=_progress(),
            notice=notice,
        )
    finally:
        _end_progress()
    return _loaded(done)
