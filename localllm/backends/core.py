"""The engine's core as installed: where its libraries are and what it was built from.

The core is libllama, libmtmd, libggml, libggml-base and the CPU backend (on x86-64
Linux as per-instruction-set modules, of which ggml loads the best), compiled
from the pinned llama.cpp source when localllm is installed (``native/core_build.py``)
and shipped inside the package in ``localllm/_core/``, next to the native module whose
rpath points there.  ``core.json`` beside them is the build's manifest: the sdist's
version and sha256, the ggml version, the sha256 of the llama.h the shim was compiled
against, the cmake flags, the libraries in load order.  With ``LOCALLLM_LLAMA_PREFIX``
the core is that prefix's ``lib/`` instead, and there is no manifest.

Nothing here loads a library (``engine/binding.py`` does), so the daemon, the CLI and
the plugin build can ask where the core is without the native module.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from localllm import config

FOLDER = "_core"
MANIFEST = "core.json"
SUFFIX = ".dylib" if sys.platform == "darwin" else ".so"
# Dependencies first: preloading in this order resolves each library's needs by soname.
LOAD_ORDER = ("libggml-base", "libggml-cpu", "libggml", "libllama", "libmtmd")


def core_dir() -> Path:
    """``localllm/_core``: in the installed package, or in the source tree for an editable
    install (where the build puts a git-ignored copy)."""
    return Path(__file__).resolve().parents[1] / FOLDER


def lib_dir() -> Path:
    """The folder the core's libraries are loaded from: the prefix's ``lib/`` when
    ``LOCALLLM_LLAMA_PREFIX`` is set, else ``localllm/_core``."""
    prefix = config.LLAMA_PREFIX.get()
    return Path(prefix).expanduser() / "lib" if prefix else core_dir()


def manifest() -> dict[str, Any]:
    """The install's record of the core in ``localllm/_core`` ({} when there is none)."""
    try:
        data = json.loads((core_dir() / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def libraries(folder: Path | None = None) -> list[Path]:
    """The core's library files in ``folder`` (default ``lib_dir()``), in load order.

    The manifest names the files (``libllama.so.0``: the soname, the name the native
    module and the plugins ask the dynamic linker for); a prefix has the plain names.
    """
    folder = folder or lib_dir()
    named = manifest().get("libs") if folder == core_dir() else None
    if isinstance(named, list) and named:
        return [folder / str(n) for n in named if (folder / str(n)).exists()]
    return [folder / f"{n}{SUFFIX}" for n in LOAD_ORDER if (folder / f"{n}{SUFFIX}").exists()]


def cpu_variants(folder: Path | None = None) -> list[Path]:
    """The CPU backend's per-instruction-set modules (``libggml-cpu-haswell.so``, ...) of a
    core built with ``GGML_CPU_ALL_VARIANTS``: never preloaded, since ggml loads only the
    one that scores best on this processor.  Empty for a core with the CPU backend linked."""
    folder = folder or lib_dir()
    if folder == core_dir():
        named = manifest().get("modules")
        if isinstance(named, list):
            return [folder / str(n) for n in named if (folder / str(n)).exists()]
    return sorted(folder.glob(f"libggml-cpu-*{SUFFIX}"))


def ggml_base() -> Path | None:
    """The core's libggml-base (what a plugin links against and shares), if installed."""
    return next((p for p in libraries() if p.name.startswith("libggml-base.")), None)
