"""cffi build script (API mode) for ``localllm._native``: compiles native/shim.c.

It owns finding libllama: by default the core that ``core_build.py`` builds from the
pinned llama.cpp source (or finds in localllm's cache), whose libraries setup.py then
copies into the package as ``localllm/_core/``, where the module's rpath points; or,
when ``LOCALLLM_LLAMA_PREFIX`` is set, a prefix holding ``include/llama.h`` and
``lib/libllama.so`` (a Homebrew llama.cpp, a CUDA/Metal build).  See native/README.md.
The build records what it compiled against (source, the llama-cpp-python version
whose sdist the core came from, sha256 of llama.h) so the binding can refuse a
mismatched libllama at import time instead of corrupting memory.

Used by setup.py (``cffi_modules=["native/build_ffi.py:ffibuilder"]``, whose
``build_ext`` builds the core first and then points the extension at it); can also
be run directly: ``python native/build_ffi.py`` builds the core if needed, copies it
to ``localllm/_core/`` and builds the module in place.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from cffi import FFI

HERE = Path(__file__).resolve().parent
PREFIX_ENV = "LOCALLLM_LLAMA_PREFIX"
# The package folder the core's libraries are copied to (localllm/backends/core.py).
CORE_FOLDER = "_core"


class LlamaNotFound(RuntimeError):
    pass


def core_build() -> ModuleType:
    """native/core_build.py, loaded by path (setup.py and cffi run this file by path too)."""
    name = "_localllm_core_build"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "core_build.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _first_existing(candidates: list[Path], what: str) -> Path:
    for c in candidates:
        if c.exists():
            return c
    tried = "\n  ".join(str(c) for c in candidates)
    raise LlamaNotFound(
        f"localllm build: cannot find {what}; tried:\n  {tried}\n"
        f"Unset {PREFIX_ENV} to build the core from the pinned source, or point it "
        "to a prefix holding include/llama.h and lib/libllama.so (see native/README.md)."
    )


def prefix() -> Path | None:
    """``LOCALLLM_LLAMA_PREFIX``, resolved, when set."""
    raw = os.environ.get(PREFIX_ENV, "").strip()
    return Path(raw).expanduser().resolve() if raw else None


def locate(core: Path | None = None) -> dict[str, str]:
    """Include dir, lib dir, rpaths and build-info strings for libllama.

    ``core``: the built core (``core_build.ensure()``); without it, where the cached core
    will be, with an empty header hash until it exists (setup() declares the extension
    before its build_ext builds the core: see setup.py).
    """
    root = prefix()
    if root is not None:
        header = _first_existing([root / "include" / "llama.h"], "llama.h")
        lib = _first_existing(
            [root / d / n for d in ("lib", "lib64") for n in ("libllama.so", "libllama.dylib")],
            "libllama",
        ).parent
        return {
            "include": str(header.parent),
            "lib": str(lib),
            "rpath": str(lib),
            "source": f"prefix:{root}",
            "lcp_version": "",
            "header_sha256": hashlib.sha256(header.read_bytes()).hexdigest(),
        }
    cb = core_build()
    if core is None:
        core = cb.cache_root().absolute() / "core" / cb.key()
    header = core / "include" / "llama.h"
    return {
        "include": str(core / "include"),
        "lib": str(core / "lib"),
        # The installed extension sits in localllm/, its core in localllm/_core/.
        "rpath": ("@loader_path" if sys.platform == "darwin" else "$ORIGIN") + "/" + CORE_FOLDER,
        "source": "core",
        "lcp_version": cb.sdist().VERSION,
        "header_sha256": hashlib.sha256(header.read_bytes()).hexdigest() if header.exists() else "",
    }


def extension_args(where: dict[str, str]) -> dict[str, Any]:
    """The compile and link settings of the module for a ``locate()`` answer."""
    return {
        "include_dirs": [str(HERE), where["include"]],
        "library_dirs": [where["lib"]],
        "libraries": ["mtmd", "llama", "ggml", "ggml-base"],
        # Only the one rpath: the core travels with the package (a prefix stays put).
        "extra_link_args": [f"-Wl,-rpath,{where['rpath']}"],
        # -O3: the per-token scans over the vocabulary (argmax, top-k: 262k logits for
        # Gemma) vectorize there and take a tenth of the time they take at -O2.
        "extra_compile_args": ["-O3", "-std=c11"],
        "define_macros": [
            ("LL_BUILD_SOURCE", f'"{where["source"]}"'),
            ("LL_BUILD_LCP_VERSION", f'"{where["lcp_version"]}"'),
            ("LL_BUILD_HEADER_SHA256", f'"{where["header_sha256"]}"'),
        ],
    }


def _rel(p: Path) -> str:
    # setuptools wants source paths relative to the project root (setup.py's cwd).
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)


def make_ffibuilder(*, absolute: bool = False, core: Path | None = None) -> FFI:
    """The cffi builder; ``absolute``: source paths for a build run from another folder;
    ``core``: the built core (see ``locate``)."""
    ffi = FFI()
    ffi.cdef((HERE / "shim.h").read_text())
    ffi.set_source(
        "localllm._native",
        '#include "shim.h"\n',
        sources=[str(HERE / "shim.c") if absolute else _rel(HERE / "shim.c")],
        **extension_args(locate(core)),
    )
    return ffi


def prepare_core(package_dir: Path) -> Path | None:
    """Build (or find) the core and copy its libraries into ``package_dir/_core``; None
    with ``LOCALLLM_LLAMA_PREFIX``, whose libraries stay where they are."""
    if prefix() is not None:
        # A core an earlier build left there would travel in the wheel, unused.
        shutil.rmtree(package_dir / CORE_FOLDER, ignore_errors=True)
        return None
    cb = core_build()
    core = cb.ensure()
    cb.install(core, package_dir / CORE_FOLDER)
    return core


ffibuilder = make_ffibuilder()

if __name__ == "__main__":
    # In-place build: localllm/_native.abi3.so (the name an editable install gives it:
    # cffi's module uses the limited API), replaced whole, so running processes keep the
    # copy they mapped.  cffi compiles inside tmpdir, hence absolute source paths.
    # The core first: into localllm/_core/ (git-ignored), where the module's rpath points.
    core = prepare_core(HERE.parent / "localllm")
    built = Path(
        make_ffibuilder(absolute=True, core=core).compile(
            tmpdir=str(HERE.parent / "build" / "cffi"), verbose=True
        )
    )
    target = HERE.parent / "localllm" / "_native.abi3.so"
    staged = target.with_name(target.name + ".new")
    staged.write_bytes(built.read_bytes())
    staged.chmod(0o755)
    os.replace(staged, target)
    print(f"built {target}")
