"""The backends localllm can build as ggml plugins, and which one this machine wants.

One ``Backend`` per plugin: its cmake switch and target, the library file it
produces, the ggml device library names it brings, and which GPU vendors it
serves.  ``wanted_backends`` turns the driver probes into "this GPU needs that
plugin; here is the one command that builds it" (for ``doctor`` and ``serve``).
The CPU backend is not here: it is part of the core.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from localllm.hardware.probes import GPUProbe

SUFFIX = ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"


@dataclass(frozen=True)
class Backend:
    name: str  # what the user types: cuda | vulkan | rocm | rpc
    title: str
    cmake_flag: str  # -D<flag>=ON
    target: str  # cmake target of the plugin
    libraries: tuple[str, ...]  # ggml device library names it brings (detect.library_of)
    vendors: tuple[str, ...]  # GPU vendors (hardware.probes) it serves
    needs: str  # the toolkit, for messages

    @property
    def filename(self) -> str:
        return f"lib{self.target}{SUFFIX}"


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "cuda",
            "NVIDIA CUDA",
            "GGML_CUDA",
            "ggml-cuda",
            ("CUDA",),
            ("nvidia",),
            "the NVIDIA driver (the build uses nvcc, or fetches NVIDIA's wheels)",
        ),
        Backend(
            "rocm",
            "AMD ROCm",
            "GGML_HIP",
            "ggml-hip",
            ("ROCm", "HIP"),
            ("amd",),
            "ROCm (hipcc, hipBLAS, rocBLAS)",
        ),
        Backend(
            "vulkan",
            "Vulkan",
            "GGML_VULKAN",
            "ggml-vulkan",
            ("Vulkan",),
            ("nvidia", "amd", "intel"),
            "Vulkan headers (1.3.261 or newer) and glslc",
        ),
        Backend(
            "rpc",
            "ggml RPC (remote devices, localllm worker)",
            "GGML_RPC",
            "ggml-rpc",
            ("RPC",),
            (),
            "nothing beyond a C++ compiler",
        ),
    )
}


def get(name: str) -> Backend:
    from localllm.errors import InvalidRequest

    b = BACKENDS.get(name.lower())
    if b is None:
        raise InvalidRequest(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return b


_VENDOR_LABEL = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


@dataclass(frozen=True)
class Wanted:
    backend: Backend | None  # None: no plugin helps (Metal lives in the core)
    gpu: GPUProbe
    hint: str

    @property
    def command(self) -> str:
        return f"localllm backends build {self.backend.name}" if self.backend else ""


def wanted_backends(gpus: Iterable[GPUProbe], libraries: set[str]) -> list[Wanted]:
    """For each GPU vendor present that no loaded backend serves: the plugin to build.

    NVIDIA wants CUDA and AMD wants ROCm (Vulkan serves both where the vendor
    toolkit is missing); Apple's Metal is part of the core on macOS.
    """
    out: list[Wanted] = []
    by_vendor: dict[str, GPUProbe] = {}
    for g in gpus:
        by_vendor.setdefault(g.vendor, g)
    for vendor, gpu in by_vendor.items():
        if vendor == "apple":
            if "Metal" not in libraries:
                out.append(
                    Wanted(
                        None,
                        gpu,
                        (
                            f"Apple GPU found ({gpu.name}) but the core has no Metal: reinstall "
                            "localllm without LOCALLLM_CORE_CMAKE_ARGS turning it off (Metal is on "
                            "by default on macOS)."
                        ),
                    )
                )
            continue
        first = {"nvidia": "cuda", "amd": "rocm"}.get(vendor, "vulkan")
        served = {lib for b in BACKENDS.values() if vendor in b.vendors for lib in b.libraries}
        if libraries & served:
            continue
        b = BACKENDS[first]
        driver = f", driver {gpu.driver}" if gpu.driver else ""
        alt = " (or 'localllm backends build vulkan')" if first != "vulkan" else ""
        out.append(
            Wanted(
                b,
                gpu,
                (
                    f"{_VENDOR_LABEL.get(vendor, vendor)} GPU found "
                    f"({gpu.name}{driver}) but no {b.title} plugin is loaded: run "
                    f"'localllm backends build {b.name}'{alt}, or 'localllm doctor --fix'."
                ),
            )
        )
    return out
