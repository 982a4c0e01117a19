"""What a person should do about this machine's hardware: the one GPU-to-plugin table.

``hardware/`` reports facts: the devices ggml lists, the GPUs the drivers see, the
plugins the probe tried.  This module turns them into advice for ``doctor``,
``backends list``, the daemon's log and the one-line hint of ``run``, ``chat`` and
``serve``: a GPU that no loaded plugin serves, and the one command that fixes it.
``PLUGINS_FOR`` is the only place that says which plugin a GPU wants:

- NVIDIA: CUDA, else Vulkan; a discrete AMD GPU: ROCm, else Vulkan;
- an AMD APU and any Intel GPU: Vulkan (ROCm supports few APUs, and there is no
  SYCL plugin here);
- Apple: nothing to add, Metal is part of the core on macOS.

The command is ``localllm backends get NAME`` when a pack the release trusts
(``trusted.toml``) fits this core's ggml version, this platform and these GPUs,
else ``localllm backends build NAME``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from localllm.backends.catalog import BACKENDS, Backend
from localllm.hardware.detect import Hardware
from localllm.hardware.probes import GPUProbe

# (vendor, integrated) -> the plugins that serve such a GPU, the one to get first.
PLUGINS_FOR: dict[tuple[str, bool], tuple[str, ...]] = {
    ("nvidia", False): ("cuda", "vulkan"),
    ("nvidia", True): ("cuda", "vulkan"),  # Jetson and GB10 boards share RAM too
    ("amd", False): ("rocm", "vulkan"),
    ("amd", True): ("vulkan",),
    ("intel", False): ("vulkan",),
    ("intel", True): ("vulkan",),
}
_VENDOR_LABEL = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel", "apple": "Apple"}


def plugins_for(gpu: GPUProbe) -> tuple[str, ...]:
    """The plugins that drive ``gpu``, best first; () for Apple's (Metal is in the core)."""
    return PLUGINS_FOR.get((gpu.vendor, gpu.integrated), ())


def serving_libraries(vendor: str) -> set[str]:
    """ggml device libraries that drive some GPU of ``vendor`` (ROCm serves an APU it
    supports as well, although Vulkan is the one to get for it)."""
    return {
        lib
        for (v, _), names in PLUGINS_FOR.items()
        if v == vendor
        for name in names
        for lib in BACKENDS[name].libraries
    }


@dataclass(frozen=True)
class Wanted:
    backend: Backend | None  # None: no plugin helps (Metal lives in the core)
    gpu: GPUProbe
    hint: str  # for doctor and the log: what is missing, the command, the alternative
    command: str = ""  # "localllm backends get cuda", or "... build cuda"; "" with no backend

    @property
    def line(self) -> str:
        """The one line ``run``, ``chat`` and ``serve`` print."""
        if not self.backend:
            return self.hint
        name, vendor = self.gpu.name, _VENDOR_LABEL.get(self.gpu.vendor, self.gpu.vendor)
        # "The NVIDIA GeForce RTX 4090", not "The NVIDIA GPU NVIDIA GeForce RTX 4090".
        who = name if name.startswith(vendor) else f"{_label(self.gpu)} {name}".strip()
        return (
            f"The {who} is not used: no {self.backend.title} plugin is loaded. "
            f"Run '{self.command}' to use it."
        )


def _label(gpu: GPUProbe) -> str:
    return _VENDOR_LABEL.get(gpu.vendor, gpu.vendor) + (
        " integrated GPU" if gpu.integrated else " GPU"
    )


@lru_cache(maxsize=16)
def command_for(backend: str, ggml_version: str) -> str:
    """``get`` when a verified pack fits this machine, else ``build`` (remembered: the
    table ships with the release, and the GPUs' architectures do not change)."""
    verb = "get" if ggml_version and verified_pack_fits(backend, ggml_version) else "build"
    return f"localllm backends {verb} {backend}"


def verified_pack_fits(backend: str, ggml_version: str) -> bool:
    """Whether ``trusted.toml`` names a pack of ``backend`` for this core, platform and GPUs.

    Read from the pack's file name, as ``backends get`` chooses (``get.choose``); the
    GPUs' architectures are asked of the driver only when such a pack exists.
    """
    from localllm.backends.get import candidates
    from localllm.backends.install import trusted_table
    from localllm.backends.manifest import machine_archs, uncovered
    from localllm.backends.pack import platform_tag

    here = platform_tag()
    packs = [
        c
        for c in candidates([(name, 0, sha) for sha, name in trusted_table().items()])
        if c.backend == backend and c.version == ggml_version and c.platform == here
    ]
    if not packs or backend not in ("cuda", "rocm"):
        return bool(packs)
    archs = machine_archs(backend)
    return bool(archs) and any(not uncovered(backend, c.archs, archs) for c in packs)


def wanted_backends(
    gpus: Iterable[GPUProbe], libraries: set[str], ggml_version: str = ""
) -> list[Wanted]:
    """For each kind of GPU present that no loaded library serves: the plugin to get.

    ``libraries`` are the ggml device libraries loaded (``Device.library`` of the
    GPUs); ``ggml_version`` is the core's, without which no pack can be matched.
    """
    out: list[Wanted] = []
    kinds: dict[tuple[str, bool], GPUProbe] = {}
    for g in gpus:
        kinds.setdefault((g.vendor, g.integrated), g)
    for (vendor, _), gpu in kinds.items():
        if vendor == "apple":
            if "Metal" not in libraries:
                out.append(Wanted(None, gpu, _no_metal(gpu)))
            continue
        names = plugins_for(gpu)
        if not names or libraries & serving_libraries(vendor):
            continue
        b = BACKENDS[names[0]]
        command = command_for(b.name, ggml_version)
        driver = f", driver {gpu.driver}" if gpu.driver else ""
        alt = "".join(f" (or 'localllm backends build {n}')" for n in names[1:2])
        out.append(
            Wanted(
                b,
                gpu,
                f"{_label(gpu)} found ({gpu.name}{driver}) but no {b.title} plugin is "
                f"loaded: run '{command}'{alt}, or 'localllm doctor --fix'.",
                command,
            )
        )
    return out


def _no_metal(gpu: GPUProbe) -> str:
    return (
        f"Apple GPU found ({gpu.name}) but the core has no Metal: reinstall "
        "localllm without LOCALLLM_CORE_CMAKE_ARGS turning it off (Metal is on "
        "by default on macOS)."
    )


def wanted(hw: Hardware) -> list[Wanted]:
    """``wanted_backends`` for what ``hw`` found."""
    libraries = {d.library for d in hw.devices if d.is_gpu}
    return wanted_backends(hw.gpus_present, libraries, hw.ggml_version)


def hints(hw: Hardware) -> tuple[str, ...]:
    """Advice for a human: no native module, a plugin that failed, a GPU without its plugin."""
    if not hw.native_ok:
        return (
            f"The native module is not usable ({hw.native_error}); "
            "reinstall localllm (pip install --force-reinstall localllm) so native/ is "
            "compiled. Models cannot run until it loads.",
        )
    out = [
        f"Backend plugin {p.get('file')} did not load: {p.get('error')}. "
        "Rebuild it with 'localllm backends build NAME' or remove it."
        for p in hw.plugins
        if not p.get("loaded")
    ]
    return (*out, *(w.hint for w in wanted(hw)))


def gpu_line(hw: Hardware) -> str:
    """The one line for ``run``, ``chat`` and ``serve``: the first GPU left unused and the
    command that fixes it; "" when every GPU is served (or the engine cannot load)."""
    if not hw.native_ok:
        return ""
    return next((w.line for w in wanted(hw) if w.backend is not None), "")
