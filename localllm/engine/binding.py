"""Loading ``localllm._native`` (the cffi shim over libllama) and checking it fits.

This module owns: preloading the installed libllama/ggml shared libraries,
importing the compiled module, refusing a module built against a different
llama.cpp than the one installed (``NativeUnavailable`` saying what to run),
routing llama.cpp's log lines into a buffer, and the process-wide queries
(system info, build info, quantize; devices and plugins are in plugins.py).
Everything else in the engine goes through ``native()``; only the runner child imports this module.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any

from localllm import config
from localllm.errors import InvalidRequest, LocalLLMError, NativeUnavailable

REBUILD_HINT = "reinstall localllm so its native module is rebuilt: " \
    "pip install --force-reinstall --no-cache-dir -e .  (or without -e for a normal install)"

# Keep the preloaded handles alive for the life of the process.
_PRELOADED: list[ctypes.CDLL] = []


def _llama_cpp_dirs() -> tuple[Path, Path] | None:
    """(package dir, site dir) of the installed llama_cpp, found without importing it."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    return pkg, pkg.parent


def _preload(libdir: Path) -> None:
    # An editable install leaves the extension in the source tree, where its
    # $ORIGIN rpath does not reach llama_cpp/lib; loading the libraries first
    # with RTLD_GLOBAL lets the dynamic linker find them by soname.
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    for name in ("libggml-base", "libggml-cpu", "libggml", "libllama", "libmtmd"):
        path = libdir / f"{name}{suffix}"
        if path.exists():
            _PRELOADED.append(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))


def _check(ffi: Any, lib: Any) -> None:
    source = ffi.string(lib.ll_build_source()).decode()
    if source != "llama-cpp-python":
        return  # built against LOCALLLM_LLAMA_PREFIX: the rpath pins that build
    built = ffi.string(lib.ll_build_lcp_version()).decode()
    try:
        installed = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        raise NativeUnavailable(
            "llama-cpp-python (which provides libllama) is not installed; "
            f"pip install llama-cpp-python=={built}, then {REBUILD_HINT}"
        ) from None
    if installed != built:
        raise NativeUnavailable(
            f"the native module was built against llama-cpp-python {built} but {installed} is "
            f"installed; {REBUILD_HINT}"
        )
    dirs = _llama_cpp_dirs()
    header = dirs[1] / "include" / "llama.h" if dirs else None
    want = ffi.string(lib.ll_build_header_sha256()).decode()
    if header is not None and header.exists():
        have = hashlib.sha256(header.read_bytes()).hexdigest()
        if have != want:
            raise NativeUnavailable(
                f"the installed llama.h differs from the one the native module was built "
                f"against; {REBUILD_HINT}"
            )


def echo_log() -> bool:
    """Whether llama.cpp's log lines also go to stderr: at LOCALLLM_DEBUG's debug and trace
    levels (1, 2), not at info (0) nor at the quieter -1 (warnings) and -2 (errors)."""
    return config.DEBUG.get() > 0


@functools.lru_cache(maxsize=1)
def native() -> tuple[Any, Any]:
    """Return ``(ffi, lib)`` of the loaded native module, initialising llama.cpp once."""
    prefix = config.LLAMA_PREFIX.get()
    dirs = _llama_cpp_dirs()
    try:
        if prefix:
            _preload(Path(prefix) / "lib")
        elif dirs is not None:
            _preload(dirs[0] / "lib")
        from localllm import _native  # type: ignore[attr-defined]
    except (ImportError, OSError) as exc:
        raise NativeUnavailable(
            f"the native module localllm._native cannot be loaded ({exc}); {REBUILD_HINT}"
        ) from exc
    ffi, lib = _native.ffi, _native.lib
    _check(ffi, lib)
    lib.ll_log_capture(2, int(echo_log()))
    lib.ll_backend_init()
    return ffi, lib


def available() -> tuple[bool, str]:
    """Whether the native module loads, and if not why (for ``localllm doctor``)."""
    try:
        native()
    except NativeUnavailable as exc:
        return False, exc.message
    return True, ""


def take_log() -> str:
    """llama.cpp's log text captured since the last call (info level and up)."""
    ffi, lib = native()
    out: list[str] = []
    buf = ffi.new("char[]", 1 << 16)
    while True:
        n = lib.ll_log_take(buf, len(buf))
        if n <= 0:
            break
        out.append(ffi.unpack(buf, n).decode("utf-8", "replace"))
    return "".join(out)


def last_errors(log: str, limit: int = 3) -> str:
    """The last few lines of a captured log that look like errors, for messages."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    bad = [ln for ln in lines if any(k in ln.lower() for k in ("error", "failed", "invalid"))]
    return "; ".join((bad or lines)[-limit:])


def system_info() -> str:
    """llama.cpp's one-line summary of CPU features and backends."""
    ffi, lib = native()
    return str(ffi.string(lib.ll_system_info()).decode().strip())


def build_info() -> dict[str, Any]:
    """What the native module was compiled against, and what is loaded."""
    ffi, lib = native()
    return {
        "source": ffi.string(lib.ll_build_source()).decode(),
        "llama_cpp_python": ffi.string(lib.ll_build_lcp_version()).decode(),
        "llama_h_sha256": ffi.string(lib.ll_build_header_sha256()).decode(),
        "llama_version": ffi.string(lib.ll_llama_version()).decode(),
        "ggml_version": ffi.string(lib.ll_ggml_version()).decode(),
        "ggml_commit": ffi.string(lib.ll_ggml_commit()).decode(),
        "gpu_offload": bool(lib.ll_supports_gpu_offload()),
        "mmap": bool(lib.ll_supports_mmap()),
    }


def quantize(in_path: str | Path, out_path: str | Path, ftype: str, threads: int = 0) -> None:
    """Quantize a GGUF with llama.cpp (``ftype`` like "Q4_K_M", "Q8_0", "F16")."""
    _, lib = native()
    code = lib.ll_ftype_from_name(ftype.encode())
    if code < 0:
        raise InvalidRequest(f"unknown quantization type {ftype!r}")
    take_log()
    rc = lib.ll_quantize(str(in_path).encode(), str(out_path).encode(), code, threads)
    if rc != 0:
        raise LocalLLMError(f"quantizing {in_path} failed: {last_errors(take_log())}")


def llama_version() -> str:
    """The loaded libllama's version string (what a disk-cached state was written by)."""
    ffi, lib = native()
    return str(ffi.string(lib.ll_llama_version()).decode())
