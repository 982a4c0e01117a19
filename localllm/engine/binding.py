"""Loading ``localllm._native`` (the cffi shim over libllama) and checking it fits.

This module owns: preloading the core's shared libraries (``localllm/_core/``, or
``LOCALLLM_LLAMA_PREFIX``'s ``lib/``: ``backends/core.py`` says where), importing the
compiled module, refusing a module built against a different llama.cpp than the core
installed beside it (``NativeUnavailable`` saying what to run), routing llama.cpp's
log lines into a buffer, and the process-wide queries (system info, build info,
quantize; devices and plugins are in plugins.py).
Everything else in the engine goes through ``native()``; only the runner child imports this module.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from localllm import config
from localllm.backends import core
from localllm.errors import InvalidRequest, LocalLLMError, NativeUnavailable

REBUILD_HINT = (
    "reinstall localllm so its native module is rebuilt: "
    "pip install --force-reinstall --no-cache-dir -e .  (or without -e for a normal install)"
)

# Keep the preloaded handles alive for the life of the process.
_PRELOADED: list[ctypes.CDLL] = []


def _llama_cpp_dirs() -> tuple[Path, Path] | None:
    """(package dir, site dir) of an installed llama_cpp, found without importing it: the
    core of a module built by an older localllm, before it built its own."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    return pkg, pkg.parent


def _preload(libs: list[Path]) -> None:
    # The module's rpath finds the core by itself; loading it first, by path and with
    # RTLD_GLOBAL, makes sure that this core is the one every later library (the module,
    # the plugins, which need libggml-base by soname) binds to, whatever else is on the
    # library path.
    for path in libs:
        _PRELOADED.append(ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))


def _check(ffi: Any, lib: Any) -> None:
    source = ffi.string(lib.ll_build_source()).decode()
    want = ffi.string(lib.ll_build_header_sha256()).decode()
    if source == "core":
        m = core.manifest()
        if not m:
            raise NativeUnavailable(
                f"the engine's core libraries are missing from {core.core_dir()}; {REBUILD_HINT}"
            )
        if m.get("llama_h_sha256") != want:
            raise NativeUnavailable(
                f"the core in {core.core_dir()} (llama.cpp from {m.get('package')} "
                f"{m.get('version')}) is not the one the native module was built against; "
                f"{REBUILD_HINT}"
            )
        return
    if source != "llama-cpp-python":
        return  # built against LOCALLLM_LLAMA_PREFIX: the rpath pins that build
    # A module an older localllm built against llama-cpp-python's libraries (an in-tree
    # build that was not redone): it works while that package stays installed.
    built = ffi.string(lib.ll_build_lcp_version()).decode()
    try:
        installed = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        raise NativeUnavailable(
            "the native module was built against llama-cpp-python's libllama, which is not "
            f"installed; {REBUILD_HINT}"
        ) from None
    if installed != built:
        raise NativeUnavailable(
            f"the native module was built against llama-cpp-python {built} but {installed} is "
            f"installed; {REBUILD_HINT}"
        )
    dirs = _llama_cpp_dirs()
    header = dirs[1] / "include" / "llama.h" if dirs else None
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


def _core_libs() -> list[Path]:
    """The libraries to preload: the prefix's, the package's core, or (a module built by
    an older localllm) llama-cpp-python's."""
    libs = core.libraries()
    if libs or config.LLAMA_PREFIX.get():
        return libs
    dirs = _llama_cpp_dirs()
    return core.libraries(dirs[0] / "lib") if dirs else []


@functools.lru_cache(maxsize=1)
def native() -> tuple[Any, Any]:
    """Return ``(ffi, lib)`` of the loaded native module, initialising llama.cpp once."""
    try:
        _preload(_core_libs())
        from localllm import _native  # type: ignore[attr-defined]
    except (ImportError, OSError) as exc:
        raise NativeUnavailable(
            f"the native module localllm._native cannot be loaded ({exc}); {REBUILD_HINT}"
        ) from exc
    ffi, lib = _native.ffi, _native.lib
    _check(ffi, lib)
    lib.ll_log_capture(2, int(echo_log()))
    lib.ll_backend_init(str(core.lib_dir()).encode())
    if not lib.ll_has_cpu_backend():
        raise NativeUnavailable(
            f"no CPU backend could be loaded from {core.lib_dir()} (none of ggml's CPU "
            f"variants there runs on this processor); {REBUILD_HINT}"
        )
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


def build_info() -> dict[str, str | bool]:
    """What the native module was compiled against, and what is loaded."""
    ffi, lib = native()
    return {
        "source": ffi.string(lib.ll_build_source()).decode(),
        # The llama-cpp-python version whose sdist the core was built from.
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
