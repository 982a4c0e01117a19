"""Where the CUDA plugin finds its runtime, and why it does not load, said for a person.

``sources`` answers, for each CUDA toolkit library the plugin needs (its
``DT_NEEDED`` libcudart and libcublas; cuBLAS finds cublasLt beside itself),
where the loader will take it from, in the loader's order: the runtime wheels
the plugin's pack named, in the cache (``runtime_wheels``: loaded before the
plugin, so nothing is searched for), the plugin's runpath
(``$ORIGIN/cuda-libs``: beside the plugin, as a package-index build or a pack
leaves it; or the toolkit folder cmake recorded for a system toolkit), else the
loader's cache (``ldconfig``), else nowhere.  ``doctor`` and ``backends build``
show it, so "it works on my machine because of LD_LIBRARY_PATH" cannot hide.

``explain`` turns ggml's load error into the reason that matters: on a machine
without the NVIDIA driver the plugin cannot load because ``libcuda.so.1`` (the
driver's) is absent, and with the driver but no GPU it loads with no device;
both are "no CUDA device", not a missing library to hunt for.  A missing
runtime library keeps ggml's words and gets the fix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from localllm.backends import elf

NO_DEVICE = "no CUDA device"
_TOOLKIT = ("libcudart.", "libcublas.", "libcublasLt.")
_MISSING = re.compile(r"(lib(?:cudart|cublas|cublasLt)\.so[.\d]*): cannot open")


def explain(error: str, loaded: bool, devices: list[str]) -> str:
    """The CUDA plugin's state in words; "" when it loaded and brought devices."""
    if loaded:
        return (
            ""
            if devices
            else (
                f"{NO_DEVICE}: the plugin loaded, but the NVIDIA driver reports no GPU (check "
                "nvidia-smi; in a container, pass the GPU through)"
            )
        )
    if "libcuda.so" in error and "cannot open" in error:
        return (
            f"{NO_DEVICE}: this machine has no NVIDIA driver (its libcuda.so.1 is not "
            "installed); the plugin loads where the driver and a GPU are"
        )
    m = _MISSING.search(error)
    if m:
        return (
            f"{error} (the CUDA runtime library {m.group(1)} is missing: run 'localllm "
            "backends build cuda' again, which puts it beside the plugin)"
        )
    return error


def no_device(text: str) -> bool:
    return text.startswith(NO_DEVICE)


def sources(plugin: Path) -> list[tuple[str, str]]:
    """(library, where the loader takes it from) for each toolkit library ``plugin`` needs."""
    try:
        info = elf.read(plugin)
    except (OSError, elf.ElfError) as exc:
        return [("?", f"cannot read {plugin.name}: {exc}")]
    origin = plugin.resolve().parent
    dirs = [
        Path(d.replace("${ORIGIN}", str(origin)).replace("$ORIGIN", str(origin)))
        for d in info.search
        if d
    ]
    from localllm.backends.cuda.runtime_wheels import libraries_for

    wheels, missing = libraries_for(plugin)
    first = {p.name: p.parent for p in wheels}
    cache: dict[str, str] | None = None
    out = []
    for name in info.needed:
        if not name.startswith(_TOOLKIT):
            continue
        if missing:
            out.append((name, f"NOT FOUND: {missing}"))
            continue
        if name in first:
            out.append((name, f"localllm's CUDA runtime ({first[name]}), loaded first"))
            continue
        found = next((d for d in dirs if d.is_absolute() and (d / name).is_file()), None)
        if found is not None:
            where = (
                f"beside the plugin ({found})"
                if found.parent == origin
                else f"{found} (the plugin's runpath)"
            )
        else:
            cache = elf.ld_cache() if cache is None else cache
            where = (
                f"{os.path.dirname(cache[name])} (the system's library path)"
                if name in cache
                else "NOT FOUND: rebuild with 'localllm backends build cuda'"
            )
        out.append((name, where))
    return out


def describe(plugin: Path) -> str:
    """One line: the libraries, grouped by where they come from."""
    groups: dict[str, list[str]] = {}
    for name, where in sources(plugin):
        groups.setdefault(where, []).append(name)
    if not groups:
        return "the plugin links no CUDA runtime library"
    return "; ".join(f"{', '.join(names)} from {where}" for where, names in groups.items())
