"""NVIDIA's CUDA compiler and libraries from the package index, for machines with only the driver.

NVIDIA publishes nvcc and the CUDA libraries as wheels: ``nvidia-cuda-nvcc``,
``nvidia-nvvm`` (nvcc's ``cicc``; without it nvcc fails with "cicc: not found"),
``nvidia-cuda-crt``, ``nvidia-cuda-cccl``, ``nvidia-cuda-runtime`` and
``nvidia-cublas``, laid out under ``nvidia/cu13/{bin,include,lib,nvvm}``.  When a
CUDA build finds no ``nvcc`` it uses the set pinned here (``SETS``): ``pip
download`` fetches it with every wheel's sha256 pinned (``--require-hashes``:
pip compares each file before anything of it is unpacked), and this module
unpacks the wheels itself, regular files under ``nvidia/<folder>/`` only, names
checked, into ``<cache>/cuda/<version>-<machine>/``: never into a Python
environment, and all or nothing.  It then completes the tree the way a toolkit
install would: ``lib64`` for nvcc's profile, the ``libX.so`` links cmake's
``find_library`` wants, and in ``lib/stubs`` a link-time stand-in for the
driver's ``libcuda.so`` (what the toolkit's own stub is: the plugin records
``libcuda.so.1`` and the driver's real one is loaded at run time).

Which set: the newest not newer than the driver's CUDA version (``nvidia-smi``),
or ``--cuda``.  Only CUDA 13 is possible: the ``-cu12`` nvcc wheels hold
``ptxas`` alone (checked from 12.1 to 12.9), so a CUDA 12 driver is told its
ways out instead.  13.0 runs on every CUDA 13 driver (580 or newer) without
leaning on minor-version compatibility, and is what an NVIDIA machine without
``nvidia-smi`` (a builder for others) gets.  ``install_runtime`` puts the CUDA
runtime and cuBLAS beside the plugin built here (``cuda-libs/``, hard links
into the tree, the plugin's runpath ``$ORIGIN/cuda-libs``), so it needs no
``LD_LIBRARY_PATH``; a pack of it names the runtime wheels instead
(``runtime_wheels``).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from localllm import paths
from localllm.backends import trust
from localllm.backends.cuda.unpack import (
    RUNTIME,
    CudaWheelError,
    Pin,
    complete_tree,
    download,
    unpack_wheel,
)
from localllm.format import format_bytes

__all__ = ["RUNTIME", "SETS", "CudaWheelError", "Wheel", "WheelSet", "choose", "install"]

MARKER = ".complete"
CU12_HAS_NO_NVCC = (
    "the package index has NVIDIA's compiler only for CUDA 13 (the CUDA 12 "
    "wheel nvidia-cuda-nvcc-cu12 holds ptxas alone, not nvcc)"
)


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    files: dict[str, tuple[str, int]]  # machine -> (sha256, size) of its wheel on the index


@dataclass(frozen=True)
class WheelSet:
    cuda: str  # "13.0"
    folder: str  # the wheels' files are under nvidia/<folder>/
    min_driver: str  # the oldest driver branch that runs it, for messages
    min_arch: int  # the oldest GPU architecture its nvcc compiles for (sm_75)
    unpacked: int  # bytes on disk once unpacked (x86-64, measured)
    wheels: tuple[Wheel, ...]

    @property
    def major(self) -> int:
        return int(self.cuda.split(".")[0])

    def download_size(self, machine: str) -> int:
        return sum(w.files[machine][1] for w in self.wheels)


def _w(name: str, version: str, x86: tuple[str, int], arm: tuple[str, int]) -> Wheel:
    return Wheel(name, version, {"x86_64": x86, "aarch64": arm})


# CUDA 13.0 Update 2, the release the pinned llama.cpp is built and tested with upstream.
# Hashes and sizes as the package index lists them; cuBLAS goes last (the bulk of it).
SETS: dict[str, WheelSet] = {
    s.cuda: s
    for s in (
        WheelSet(
            "13.0",
            "cu13",
            "580",
            75,
            875_698_735,
            (
                _w(
                    "nvidia-cuda-nvcc",
                    "13.0.88",
                    ("56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03", 37384532),
                    ("c7ff28f86a24effdc6c034fa15230c549a273e4771b10a7fec14996f8cf3307f", 32455430),
                ),
                _w(
                    "nvidia-nvvm",
                    "13.0.88",
                    ("c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0", 61601415),
                    ("c4376a291d72d22a315d9d2f69bdae8f8cd83a627f75bad395cee49a0fe65dc1", 59234185),
                ),
                _w(
                    "nvidia-cuda-crt",
                    "13.0.88",
                    ("2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4", 134086),
                    ("ee2ea2a97073e02ee62bb27841f437332be2c248e3eac013df07997ada39c003", 134086),
                ),
                _w(
                    "nvidia-cuda-cccl",
                    "13.0.85",
                    ("e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649", 3120526),
                    ("6f0203e29fed809ee2b7fe9b1344df66ecab990c37d6a2e0e189b26d6c97ed7c", 3120528),
                ),
                _w(
                    "nvidia-cuda-runtime",
                    "13.0.96",
                    ("7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548", 2243632),
                    ("ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55", 2261060),
                ),
                _w(
                    "nvidia-cublas",
                    "13.1.0.3",
                    ("ee8722c1f0145ab246bccb9e452153b5e0515fd094c3678df50b2a0888b8b171", 423133236),
                    ("c86fc7f7ae36d7528288c5d88098edcb7b02c633d262e7ddbb86b0ad91be5df2", 542851226),
                ),
            ),
        ),
    )
}


def machine() -> str:
    return platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")


def driver_cuda(smi_text: str) -> tuple[int, int] | None:
    """The CUDA version the driver supports, from ``nvidia-smi``'s banner ("CUDA Version: 13.0")."""
    m = re.search(r"CUDA Version\s*:\s*(\d+)\.(\d+)", smi_text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def arch_number(arch: str) -> int:
    """``"90"``, ``"90-real"``, ``"120a"`` -> 90, 90, 120 (0 when it is not one)."""
    m = re.match(r"(\d+)", arch.strip())
    return int(m.group(1)) if m else 0


def _version(ws: WheelSet) -> tuple[int, int]:
    major, minor = ws.cuda.split(".")
    return int(major), int(minor)


def choose(
    requested: str | None, driver: tuple[int, int] | None, archs: list[str]
) -> tuple[WheelSet, str]:
    """(the set to use, why it was chosen), or ``CudaWheelError`` with the ways out."""
    oldest = min(SETS.values(), key=_version)
    if requested:
        want = requested.strip()
        if want.split(".")[0] == "12":
            raise CudaWheelError(
                f"--cuda 12: {CU12_HAS_NO_NVCC}. Install the CUDA 12 toolkit "
                "(this build then uses its nvcc), or build with --cuda 13 for "
                f"a driver {oldest.min_driver} or newer"
            )
        same_major = [s for s in SETS.values() if want.isdigit() and s.major == int(want)]
        chosen = SETS.get(want) or (max(same_major, key=_version) if same_major else None)
        if chosen is None:
            raise CudaWheelError(
                f"--cuda {want}: this localllm knows CUDA "
                f"{', '.join(sorted(SETS))} from the package index"
            )
        why = f"asked for with --cuda {want}"
    elif driver is None:
        chosen = oldest
        why = (
            f"no driver answered nvidia-smi: CUDA {chosen.cuda}, which every driver "
            f"{chosen.min_driver} or newer runs"
        )
    else:
        fits = [s for s in SETS.values() if _version(s) <= driver]
        if not fits:
            raise CudaWheelError(
                f"this NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, and "
                f"{CU12_HAS_NO_NVCC}. Update the driver to {oldest.min_driver} or newer and "
                "run this again, or install the CUDA toolkit for your driver (this build then "
                "uses its nvcc), or build the Vulkan plugin instead"
            )
        chosen = max(fits, key=_version)
        why = f"for the driver's CUDA {driver[0]}.{driver[1]} (nvidia-smi)"
    if driver is not None and _version(chosen) > driver:
        raise CudaWheelError(
            f"CUDA {chosen.cuda} needs a driver {chosen.min_driver} or newer; "
            f"this one supports CUDA {driver[0]}.{driver[1]}: update the driver"
        )
    old = [a for a in archs if 0 < arch_number(a) < chosen.min_arch]
    if old:
        raise CudaWheelError(
            f"CUDA {chosen.major} cannot compile for sm_{', sm_'.join(old)} (its oldest is "
            f"sm_{chosen.min_arch}), and {CU12_HAS_NO_NVCC}: install the CUDA 12 toolkit for "
            "these GPUs, or build the Vulkan plugin"
        )
    return chosen, why


def pins(ws: WheelSet, machine: str) -> list[Pin]:
    """The set's wheels for ``machine`` as pip pins, or ``CudaWheelError``."""
    if any(machine not in w.files for w in ws.wheels):
        raise CudaWheelError(
            f"NVIDIA's CUDA {ws.cuda} wheels are pinned here for "
            f"{', '.join(sorted(ws.wheels[0].files))}, not {machine}"
        )
    return [Pin(w.name, w.version, w.files[machine][0]) for w in ws.wheels]


def root_for(ws: WheelSet) -> Path:
    # Absolute: cmake and nvcc run in the cache folder, not where the user stands.
    return paths.cache().absolute() / "cuda" / f"{ws.cuda}-{machine()}"


def installed(ws: WheelSet) -> Path | None:
    root = root_for(ws)
    return root if (root / MARKER).is_file() else None


def plan_text(ws: WheelSet, why: str) -> str:
    """What ``install`` downloads, how big, and where: said before it starts."""
    names = ", ".join(f"{w.name} {w.version}" for w in ws.wheels)
    return (
        f"The CUDA plugin is built with NVIDIA's CUDA {ws.cuda} compiler and libraries "
        f"from the package index ({why}): {names}. That "
        f"is {format_bytes(ws.download_size(machine()))} to download, about "
        f"{format_bytes(ws.unpacked)} on disk in {root_for(ws)} (localllm's cache; no "
        "Python environment is changed; delete the folder to remove it). To use your own "
        "toolkit instead, put its nvcc on PATH or set CUDA_HOME."
    )


def check_space(ws: WheelSet, build_bytes: int = 2 << 30) -> None:
    """``CudaWheelError`` unless the cache's disk holds the wheels, the tree and a build."""
    need = ws.download_size(machine()) + ws.unpacked + build_bytes
    folder = paths.cache().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < need:
        raise CudaWheelError(
            f"the CUDA toolkit and the build need about {format_bytes(need)} "
            f"free in {paths.cache()}, and {format_bytes(free)} is free: make "
            "room or point LOCALLLM_CACHE at a bigger disk"
        )


def install(
    ws: WheelSet, cxx: str, log: IO[str], progress: Callable[[str, int, int], None] | None = None
) -> Path:
    """The set's tree (see the module docstring), downloaded and unpacked when missing."""
    done = installed(ws)
    if done:
        return done
    root = root_for(ws)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f".tmp-{root.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        wheels = download(
            pins(ws, machine()),
            tmp / "dl",
            log,
            progress,
            what=f"the CUDA {ws.cuda} wheels",
            offline="install the CUDA toolkit and put its nvcc on PATH",
        )
        tree = tmp / "tree"
        for i, wheel in enumerate(wheels):
            if progress:
                progress("unpack", i, len(wheels))
            unpack_wheel(wheel, ws.folder, tree)
            wheel.unlink()  # the disk holds one copy, not two
        complete_tree(tree, cxx, log)
        (tree / MARKER).write_text(" ".join(f"{w.name}=={w.version}" for w in ws.wheels))
        shutil.rmtree(root, ignore_errors=True)  # an incomplete one: no marker
        try:
            os.replace(tree, root)
        except OSError:
            if not installed(ws):  # else another build put it there meanwhile
                raise
    except (OSError, zipfile.BadZipFile) as exc:
        raise CudaWheelError(
            f"could not install the CUDA {ws.cuda} wheels into {root}: {exc}"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def cmake_args(root: Path, libs_folder: str) -> tuple[list[str], dict[str, str]]:
    """cmake arguments and environment of a build with the tree at ``root``: its nvcc and
    libraries, the stand-in driver to link, and a runpath to the folder beside the plugin."""
    nvcc = root / "bin" / "nvcc"
    return (
        [
            f"-DCMAKE_CUDA_COMPILER={nvcc}",
            f"-DCUDAToolkit_ROOT={root}",
            f"-DCUDA_cuda_driver_LIBRARY={root / 'lib' / 'stubs' / 'libcuda.so'}",
            # The installed plugin searches only its own folder's cuda-libs/, never the
            # cache (which the user may clear) nor the build tree.
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
            f"-DCMAKE_INSTALL_RPATH=$ORIGIN/{libs_folder}",
        ],
        {"CUDACXX": str(nvcc)},
    )


def runtime_files(root: Path) -> list[Path]:
    """The CUDA runtime and cuBLAS libraries of the tree (real files, by soname)."""
    lib = root / "lib"
    return sorted(
        p for p in lib.iterdir() if RUNTIME.fullmatch(p.name) and p.is_file() and not p.is_symlink()
    )


def install_runtime(root: Path, folder: Path, libs_folder: str) -> Path:
    """Put the runtime libraries of ``root`` in ``folder/libs_folder`` (0755, swapped in whole);
    hard links where the disk allows, so the cache and the plugin share one copy."""
    dest = folder / libs_folder
    trust.make_dirs(folder)
    tmp = folder / f".tmp-{libs_folder}-{os.getpid()}"
    old = folder / f".old-{libs_folder}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(mode=0o755)
        tmp.chmod(0o755)
        for src in runtime_files(root):
            try:
                os.link(src, tmp / src.name)
            except OSError:
                shutil.copy2(src, tmp / src.name)
            (tmp / src.name).chmod(0o755)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return dest
