"""The backends localllm can build as ggml plugins.

One ``Backend`` per plugin: its cmake switch and target, the library file it
produces, and the ggml device library names it brings.  Which GPU wants which
plugin is ``backends/advice.py``'s table.  The CPU backend is not here: it is
part of the core.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from localllm.config import LLM_LIBRARY_DEVICES

SUFFIX = ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"


@dataclass(frozen=True)
class Backend:
    name: str  # what the user types: cuda | vulkan | rocm | rpc
    title: str
    cmake_flag: str  # -D<flag>=ON
    target: str  # cmake target of the plugin
    # ggml device library names it brings (detect.library_of); LOCALLLM_LLM_LIBRARY's table,
    # so choosing a library and building its plugin name the same devices.
    libraries: tuple[str, ...]
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
            LLM_LIBRARY_DEVICES["cuda"],
            "the NVIDIA driver (the build uses nvcc, or fetches NVIDIA's wheels)",
        ),
        Backend(
            "rocm",
            "AMD ROCm",
            "GGML_HIP",
            "ggml-hip",
            LLM_LIBRARY_DEVICES["rocm"],
            "ROCm (hipcc, hipBLAS, rocBLAS)",
        ),
        Backend(
            "vulkan",
            "Vulkan",
            "GGML_VULKAN",
            "ggml-vulkan",
            LLM_LIBRARY_DEVICES["vulkan"],
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
