"""The backends localllm can build as ggml plugins.

One ``Backend`` per plugin: its cmake switch and target, the library file it
produces, and the ggml device library names it brings.  Which GPU wants which
plugin is ``backends/advice.py``'s table.  The CPU backend is not here: it is
part of the core.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

SUFFIX = ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"


@dataclass(frozen=True)
class Backend:
    name: str  # what the user types: cuda | vulkan | rocm | rpc
    title: str
    cmake_flag: str  # -D<flag>=ON
    target: str  # cmake target of the plugin
    libraries: tuple[str, ...]  # ggml device library names it brings (detect.library_of)
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
            "the NVIDIA driver (the build uses nvcc, or fetches NVIDIA's wheels)",
        ),
        Backend(
            "rocm",
            "AMD ROCm",
            "GGML_HIP",
            "ggml-hip",
            ("ROCm", "HIP"),
            "ROCm (hipcc, hipBLAS, rocBLAS)",
        ),
        Backend(
            "vulkan",
            "Vulkan",
            "GGML_VULKAN",
            "ggml-vulkan",
            ("Vulkan",),
            "Vulkan headers (1.3.261 or newer), its loader, glslc and SPIRV-Headers",
        ),
        Backend(
            "rpc",
            "ggml RPC (remote devices, localllm worker)",
            "GGML_RPC",
            "ggml-rpc",
            ("RPC",),
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
