"""cffi build script (API mode) for ``localllm._native``: compiles native/shim.c.

It owns finding libllama: by default the headers and shared libraries that the
pinned ``llama-cpp-python`` installs into the build environment; or, when
``LOCALLLM_LLAMA_PREFIX`` is set, a prefix holding ``include/llama.h`` and
``lib/libllama.so`` (a Homebrew llama.cpp, a CUDA/Metal build).  See
native/README.md.  The build records what it compiled against (source,
llama-cpp-python version, sha256 of llama.h) so the binding can refuse a
mismatched libllama at import time instead of corrupting memory.

Used by setup.py (``cffi_modules=["native/build_ffi.py:ffibuilder"]``); can
also be run directly: ``python native/build_ffi.py`` builds in place.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
PREFIX_ENV = "LOCALLLM_LLAMA_PREFIX"


class LlamaNotFound(RuntimeError):
    pass


def _first_existing(candidates: list[Path], what: str) -> Path:
    for c in candidates:
        if c.exists():
            return c
    tried = "\n  ".join(str(c) for c in candidates)
    raise LlamaNotFound(
        f"localllm build: cannot find {what}; tried:\n  {tried}\n"
        f"Install llama-cpp-python==0.3.36 in the build environment, or set {PREFIX_ENV} "
        "to a prefix holding include/llama.h and lib/libllama.so (see native/README.md)."
    )


def locate() -> dict[str, str]:
    """Return include dir, lib dir, rpaths and build-info strings for libllama."""
    prefix = os.environ.get(PREFIX_ENV)
    if prefix:
        root = Path(prefix).expanduser().resolve()
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
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise LlamaNotFound(
            "localllm build: llama-cpp-python is not installed in the build environment "
            f"(pip install llama-cpp-python==0.3.36), or set {PREFIX_ENV} (see native/README.md)."
        )
    pkg = Path(next(iter(spec.submodule_search_locations)))
    site = pkg.parent
    data = Path(sysconfig.get_paths()["data"])
    header = _first_existing(
        [site / "include" / "llama.h", data / "include" / "llama.h", pkg / "include" / "llama.h"],
        "llama.h (installed by llama-cpp-python)",
    )
    lib = _first_existing(
        [pkg / "lib" / "libllama.so", pkg / "lib" / "libllama.dylib", site / "lib" / "libllama.so"],
        "libllama (installed by llama-cpp-python)",
    ).parent
    return {
        "include": str(header.parent),
        "lib": str(lib),
        # The installed extension sits in site-packages/localllm/, next to llama_cpp/.
        "rpath": ("@loader_path" if sys.platform == "darwin" else "$ORIGIN") + "/../llama_cpp/lib",
        "source": "llama-cpp-python",
        "lcp_version": importlib.metadata.version("llama-cpp-python"),
        "header_sha256": hashlib.sha256(header.read_bytes()).hexdigest(),
    }


def _rel(p: Path) -> str:
    # setuptools wants source paths relative to the project root (setup.py's cwd).
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)


def make_ffibuilder(*, absolute: bool = False) -> FFI:
    """The cffi builder; ``absolute``: source paths for a build run from another folder."""
    where = locate()
    ffi = FFI()
    ffi.cdef((HERE / "shim.h").read_text())
    rpaths = [where["rpath"], where["lib"]]  # the absolute one serves in-tree builds
    ffi.set_source(
        "localllm._native",
        '#include "shim.h"\n',
        sources=[str(HERE / "shim.c") if absolute else _rel(HERE / "shim.c")],
        include_dirs=[str(HERE), where["include"]],
        library_dirs=[where["lib"]],
        libraries=["mtmd", "llama", "ggml", "ggml-base"],
        extra_link_args=[f"-Wl,-rpath,{r}" for r in rpaths],
        # -O3: the per-token scans over the vocabulary (argmax, top-k: 262k logits for
        # Gemma) vectorize there and take a tenth of the time they take at -O2.
        extra_compile_args=["-O3", "-std=c11"],
        define_macros=[
            ("LL_BUILD_SOURCE", f'"{where["source"]}"'),
            ("LL_BUILD_LCP_VERSION", f'"{where["lcp_version"]}"'),
            ("LL_BUILD_HEADER_SHA256", f'"{where["header_sha256"]}"'),
        ],
    )
    return ffi


ffibuilder = make_ffibuilder()

if __name__ == "__main__":
    # In-place build: localllm/_native.abi3.so (the name an editable install gives it:
    # cffi's module uses the limited API), replaced whole, so running processes keep the
    # copy they mapped.  cffi compiles inside tmpdir, hence absolute source paths.
    built = Path(make_ffibuilder(absolute=True).compile(
        tmpdir=str(HERE.parent / "build" / "cffi"), verbose=True))
    target = HERE.parent / "localllm" / "_native.abi3.so"
    staged = target.with_name(target.name + ".new")
    staged.write_bytes(built.read_bytes())
    staged.chmod(0o755)
    os.replace(staged, target)
    print(f"built {target}")
