"""What a plugin build needs from this machine, checked before anything compiles.

Each check returns a ``Toolkit`` (paths, versions, the cmake arguments it
adds) or raises ``ToolkitMissing`` with what is missing and how to get it:
a missing toolkit is a sentence for a person, not a cmake error 300 lines
into a log.  cmake and ninja come from the package index when the machine
has none (they are on PyPI as wheels); the build says so first, with what goes
where and how to avoid it.

Every Python tool runs isolated, in a folder of ours (``isolated``); for the
same reason a relative entry in ``PATH`` ("." or an empty one) is not searched
for tools.

CUDA without ``nvcc`` is not a dead end: ``check_cuda`` then picks NVIDIA's
compiler from the package index (``cuda.wheels``) and leaves the download to the
build, which says what and how big first.  Either way a CUDA build compiles only
what this machine runs: machine code for its GPUs' own architectures (no PTX for
others), the flash-attention kernels of the KV cache types localllm offers, and
no NCCL (one process drives every local GPU).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localllm.backends import vulkan_check
from localllm.backends.catalog import Backend
from localllm.backends.cuda import wheels as cuda_wheels
from localllm.backends.isolated import pip_argv, work_dir
from localllm.errors import LocalLLMError


class ToolkitMissing(LocalLLMError):
    """The machine lacks something the build needs; the message says what and how."""


@dataclass
class Toolkit:
    cmake: str
    ninja: str
    cmake_args: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. "nvcc 12.4 at /usr/local/cuda"
    env: dict[str, str] = field(default_factory=dict)
    # CUDA from the package index, and why that set: the build installs it (after asking).
    wheels: tuple[cuda_wheels.WheelSet, str] | None = None


def _run(argv: list[str], timeout: float = 10.0) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=work_dir())
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def _which(name: str, *extra_dirs: str) -> str:
    """On PATH, next to this Python (a venv's bin/), or in one of ``extra_dirs``; only
    absolute folders count, so a tool in the working folder is never picked up."""
    dirs = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(d)]
    found = shutil.which(name, path=os.pathsep.join(dirs))
    if found:
        return found
    for d in (str(Path(sys.executable).parent), *extra_dirs):
        cand = Path(d) / name
        if d and cand.is_absolute() and cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return ""


def build_tools(
    install: bool = True, notice: Callable[[str], None] | None = None
) -> tuple[str, str]:
    """Paths of cmake and ninja; installed from the package index into this Python if absent,
    after ``notice`` has told the user what will be installed, where, and how to avoid it."""
    cmake, ninja = _which("cmake"), _which("ninja")
    missing = [n for n, p in (("cmake", cmake), ("ninja", ninja)) if not p]
    argv = pip_argv("install", "--quiet", *missing)
    if missing and install:
        if notice:
            notice(
                f"{' and '.join(missing)} not found on PATH: installing "
                f"{', '.join(missing)} from the package index into this Python "
                f"({sys.prefix}) with '{' '.join(argv)}'. To avoid this, install them "
                "yourself (e.g. apt install cmake ninja-build, brew install cmake ninja) "
                "and run the build again."
            )
        subprocess.run(argv, check=False, cwd=work_dir())
        cmake, ninja = cmake or _which("cmake"), ninja or _which("ninja")
    if not cmake or not ninja:
        tried = f"installing them with pip failed ({' '.join(argv)}). " if install else ""
        raise ToolkitMissing(
            f"building a backend needs cmake and ninja; {tried}Install them with your "
            "package manager (e.g. apt install cmake ninja-build) and try again."
        )
    return cmake, ninja


def compiler() -> str:
    cxx = os.environ.get("CXX") or _which("c++") or _which("g++") or _which("clang++")
    if not cxx:
        raise ToolkitMissing(
            "building a backend needs a C++ compiler (g++ or clang++): "
            "install build-essential (Debian/Ubuntu) or Xcode's command line "
            "tools (macOS)"
        )
    return cxx


def cuda_archs(smi_output: str) -> list[str]:
    """``nvidia-smi --query-gpu=compute_cap`` lines ("8.9") -> cmake archs ("89"), unique."""
    out: list[str] = []
    for line in smi_output.splitlines():
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", line)
        if m and (arch := m.group(1) + m.group(2)) not in out:
            out.append(arch)
    return out


def cuda_flags(archs: list[str]) -> list[str]:
    """The cmake flags every CUDA build gets (see the module docstring)."""
    from localllm.config import KV_TYPES

    # "90" would be machine code and PTX; "90-real" is the machine code this GPU runs.
    real = [a if not re.fullmatch(r"\d+[af]?", a) else f"{a}-real" for a in archs]
    # f16-f16 is always built; f32 has no vector kernels.
    quants = ";".join(f"{t}-{t}" for t in KV_TYPES if t not in ("f16", "f32"))
    return [
        f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(real)}",
        f"-DGGML_CUDA_FA_QUANTS={quants}",
        "-DGGML_CUDA_NCCL=OFF",
    ]


def check_cuda(
    arch: str | None, cuda: str | None = None
) -> tuple[list[str], list[str], dict[str, str], tuple[cuda_wheels.WheelSet, str] | None]:
    """(cmake args, notes, environment, package-index set or None) of a CUDA build.

    The system's nvcc when there is one (of the major ``cuda`` asks for, if given), else
    the package-index set for the driver (``cuda_wheels.choose``)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = _which("nvcc", str(Path(home) / "bin"))
    m = re.search(r"release (\d+\.\d+)", _run([nvcc, "--version"])) if nvcc else None
    version = m.group(1) if m else "?"
    archs = (
        [a.strip() for a in arch.split(",") if a.strip()]
        if arch
        else cuda_archs(_run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]))
    )
    if not archs:
        raise ToolkitMissing(
            "no NVIDIA GPU answered nvidia-smi, so the architecture to build "
            "for is unknown: pass --arch (e.g. --arch 89 for an RTX 4090, "
            "--arch 90 for an H100)"
        )
    flags = cuda_flags(archs)
    notes = [f"CUDA architectures {', '.join(archs)}"]
    blas = _cublas_header(nvcc, home) if nvcc else None
    if nvcc and blas and (not cuda or version.split(".")[0] == cuda.split(".")[0]):
        # Named, not left to CUDACXX (which a configured tree ignores), and without the
        # runpath of a package-index build configured in the same tree before.
        return (
            [*flags, f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=OFF"],
            [f"nvcc {version} at {nvcc}", *notes],
            {"CUDACXX": nvcc},
            None,
        )
    where = (
        f"no CUDA toolkit (nvcc) on PATH or in {home}/bin"
        if not nvcc
        else f"the CUDA {version} toolkit of {nvcc} has no cuBLAS (cublas_v2.h)"
        if not blas
        else f"the nvcc at {nvcc} is CUDA {version}"
    )
    try:
        ws, why = cuda_wheels.choose(cuda, cuda_wheels.driver_cuda(_run(["nvidia-smi"])), archs)
    except cuda_wheels.CudaWheelError as exc:
        raise ToolkitMissing(
            f"the CUDA plugin needs NVIDIA's compiler: {where}, and {exc}"
        ) from None
    why = f"{why}; {where}"
    return flags, [f"CUDA {ws.cuda} from the package index ({why})", *notes], {}, (ws, why)


def _cublas_header(nvcc: str, home: str) -> Path | None:
    """cublas_v2.h of the toolkit ``nvcc`` belongs to, where CMake's FindCUDAToolkit looks
    for it; None when it has none (an nvcc installed without the CUDA libraries: the
    plugin links cuBLAS, and configuring would fail on ``CUDA::cublas``)."""
    roots = {Path(nvcc).resolve().parent.parent, Path(home)}
    dirs = [d for r in roots for d in (r / "include", *sorted(r.glob("targets/*/include")))]
    dirs += [Path("/usr/include")]
    return next((d / "cublas_v2.h" for d in dirs if (d / "cublas_v2.h").is_file()), None)


def check_vulkan() -> tuple[list[str], list[str], dict[str, str]]:
    """Headers, loader, glslc and SPIRV-Headers (``vulkan_check``), all named when missing."""
    found = vulkan_check.check()
    if found.missing or found.old_headers:
        raise ToolkitMissing(found.message())
    return [], list(found.notes), {}


def check_rocm(arch: str | None) -> tuple[list[str], list[str], dict[str, str]]:
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    hipcc = _which("hipcc", str(Path(rocm) / "bin"))
    if not hipcc:
        raise ToolkitMissing(
            f"the ROCm plugin needs ROCm's hipcc (not on PATH or in {rocm}/bin):"
            " install ROCm with hipBLAS and rocBLAS, or set ROCM_PATH"
        )
    targets = (
        arch.split(",")
        if arch
        else sorted(
            set(
                re.findall(
                    r"\bgfx[0-9a-f]+\b",
                    _run([_which("rocminfo", str(Path(rocm) / "bin")) or "rocminfo"]),
                )
            )
        )
    )
    if not targets:
        raise ToolkitMissing(
            "rocminfo reported no AMD GPU, so the target is unknown: pass "
            "--arch (e.g. --arch gfx1100)"
        )
    clang = Path(rocm) / "llvm" / "bin" / "clang"
    env = {"HIPCXX": str(clang)} if clang.exists() else {}
    return (
        [f"-DGPU_TARGETS={';'.join(targets)}"],
        [f"hipcc at {hipcc}", f"targets {', '.join(targets)}"],
        env,
    )


def check(
    backend: Backend,
    arch: str | None = None,
    install_tools: bool = True,
    notice: Callable[[str], None] | None = None,
    cuda: str | None = None,
) -> Toolkit:
    """Everything ``backend`` needs, or ``ToolkitMissing`` saying what is not there
    (``notice``: told before anything is installed, see ``build_tools``; ``cuda``: the
    CUDA version asked for, ``--cuda``)."""
    compiler()
    args: list[str] = []
    notes: list[str] = []
    env: dict[str, str] = {}
    wheels = None
    if backend.name == "cuda":
        args, notes, env, wheels = check_cuda(arch, cuda)
    elif backend.name == "vulkan":
        args, notes, env = check_vulkan()
    elif backend.name == "rocm":
        args, notes, env = check_rocm(arch)
    cmake, ninja = build_tools(install_tools, notice)
    return Toolkit(cmake, ninja, args, notes, env, wheels)
