"""Probes for GPUs that exist on the machine, whether or not this build can use them.

ggml only lists devices for the backends it was compiled with, so a CPU-only
wheel on a machine with an RTX card shows nothing but "CPU".  These probes look
at the driver files and vendor tools directly, so ``detect`` can say "there is
a GPU here, rebuild with CUDA".  Every probe is cheap, has a timeout and never
raises: a broken vendor tool means "no information", not a failed doctor.
Intel GPUs, and AMD GPUs that KFD does not list, come from the DRM sysfs
(``hardware/drm.py``), which also tells an integrated GPU (an APU) from a card.
These are facts only; which plugin a GPU wants is ``backends/advice.py``'s.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from localllm.hardware import drm

MiB = 1024 * 1024
TOOL_TIMEOUT_S = 5.0

Runner = Callable[[list[str]], str | None]


@dataclass(frozen=True)
class GPUProbe:
    """A GPU seen by its driver; memory in bytes, 0 when unknown."""

    vendor: Literal["nvidia", "amd", "intel", "apple"]
    name: str
    driver: str = ""
    total: int = 0
    free: int = 0
    integrated: bool = False  # shares system RAM: an AMD APU, an Intel iGPU


def run_tool(argv: list[str]) -> str | None:
    """Run a vendor tool if it is installed; its stdout, or None on any failure."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def parse_nvidia_driver(text: str) -> str:
    """``/proc/driver/nvidia/version`` -> driver version such as ``"550.54.14"``."""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    if match:
        return match.group(1)
    match = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", text)
    return match.group(1) if match else ""


def parse_nvidia_smi(text: str, driver: str = "") -> list[GPUProbe]:
    """``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0]:
            continue
        total = int(parts[1]) * MiB if parts[1].isdigit() else 0
        free = int(parts[2]) * MiB if parts[2].isdigit() else 0
        gpus.append(GPUProbe("nvidia", parts[0], driver, total, free))
    return gpus


def probe_nvidia(root: Path = Path("/"), run: Runner = run_tool) -> list[GPUProbe]:
    version_file = root / "proc/driver/nvidia/version"
    try:
        driver = parse_nvidia_driver(version_file.read_text())
        has_driver = True
    except OSError:
        driver, has_driver = "", False
    out = run(
        ["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"]
    )
    gpus = parse_nvidia_smi(out, driver) if out else []
    if not gpus and has_driver:
        # Driver loaded but no nvidia-smi (minimal containers): one entry says enough.
        gpus = [GPUProbe("nvidia", "NVIDIA GPU", driver)]
    return gpus


def parse_kfd_properties(text: str) -> dict[str, int]:
    props = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            props[parts[0]] = int(parts[1])
    return props


def probe_amd(
    root: Path = Path("/"), run: Runner = run_tool, cards: list[drm.DRMCard] | None = None
) -> list[GPUProbe]:
    """AMD GPUs from the KFD topology (what ROCm itself enumerates), else from DRM ``cards``."""
    cards = drm.cards(root) if cards is None else cards
    nodes_dir = root / "sys/class/kfd/kfd/topology/nodes"
    if not nodes_dir.is_dir():
        return [_from_card(c) for c in cards if c.vendor == "amd"]
    driver = ""
    try:
        driver = (root / "sys/module/amdgpu/version").read_text().strip()
    except OSError:
        pass
    gpus = []
    for node in sorted(nodes_dir.iterdir(), key=lambda p: p.name):
        try:
            props = parse_kfd_properties((node / "properties").read_text())
        except OSError:
            continue
        if props.get("simd_count", 0) <= 0:  # CPU nodes have no SIMD units
            continue
        try:
            name = (node / "name").read_text().strip()
        except OSError:
            name = ""
        gfx = props.get("gfx_target_version", 0)
        if not name or name.isdigit():
            name = (
                f"AMD GPU (gfx{gfx // 10000}{(gfx // 100) % 100:x}{gfx % 100:x})"
                if gfx
                else "AMD GPU"
            )
        total = (
            sum(
                parse_kfd_properties((bank / "properties").read_text()).get("size_in_bytes", 0)
                for bank in sorted((node / "mem_banks").glob("*"))
                if (bank / "properties").is_file()
            )
            if (node / "mem_banks").is_dir()
            else 0
        )
        gpus.append(GPUProbe("amd", name, driver, total, integrated=_kfd_apu(props, cards)))
    if not gpus:
        gpus = [_from_card(c) for c in cards if c.vendor == "amd"]
    if not gpus and run(["rocm-smi", "--showproductname"]):
        gpus = [GPUProbe("amd", "AMD GPU", driver)]
    return gpus


def _kfd_apu(props: dict[str, int], cards: list[drm.DRMCard]) -> bool:
    """A KFD GPU node is an APU's: it has CPU cores too, or DRM says so of its device id."""
    device_id = props.get("device_id", -1)
    return (
        props.get("cpu_cores_count", 0) > 0
        or device_id in drm.AMD_APU_DEVICE_IDS
        or any(c.integrated for c in cards if c.vendor == "amd" and c.device_id == device_id)
    )


def _from_card(card: drm.DRMCard) -> GPUProbe:
    kind = "integrated GPU" if card.integrated else "GPU"
    label = {"intel": "Intel", "amd": "AMD"}[card.vendor]
    return GPUProbe(
        card.vendor,
        f"{label} {kind} ({card.pci_id})",
        card.driver,
        card.vram,
        integrated=card.integrated,
    )


def probe_intel(cards: list[drm.DRMCard]) -> list[GPUProbe]:
    """Intel GPUs (integrated or Arc) from the DRM ``cards``; no vendor tool is needed."""
    return [_from_card(c) for c in cards if c.vendor == "intel"]


def probe_apple() -> list[GPUProbe]:
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return [GPUProbe("apple", "Apple Silicon GPU")]
    return []


def probe_all(root: Path = Path("/"), run: Runner = run_tool) -> list[GPUProbe]:
    """Every GPU the drivers on this machine report."""
    cards = drm.cards(root)
    return [
        *probe_nvidia(root, run),
        *probe_amd(root, run, cards),
        *probe_intel(cards),
        *probe_apple(),
    ]
