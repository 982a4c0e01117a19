"""GPUs as the kernel's DRM subsystem lists them (``/sys/class/drm/card*``), on Linux.

The vendor tools see only their own cards: ``nvidia-smi`` NVIDIA's, the KFD topology
the GPUs amdgpu hands to ROCm.  An Intel GPU has no such tool, and an AMD APU may be
missing from KFD altogether (no ``amdkfd``, or an old kernel).  Every display
controller a driver bound has a ``cardN`` folder whose ``device`` is its PCI
function, with ``vendor``, ``device`` and ``class`` files; amdgpu adds
``mem_info_vram_total``.  ``cards`` reads those facts and nothing else: which plugin
serves a card is the backends' business (``backends/advice.py``).

Integrated or not: an Intel GPU is integrated when it sits at PCI slot 00:02.0,
where every Intel iGPU lives (the discrete Arc cards hang off a PCIe bridge).  An
AMD GPU is an APU when its PCI device id is one of the APUs' below, or when its
VRAM is at most ``APU_VRAM_MAX``: an APU's VRAM is the firmware's carve-out from
system RAM (512 MiB to 2 GiB by default), while every discrete card ROCm supports
has more.  ``root`` replaces ``/`` so tests can build a fake tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

GiB = 1024**3
APU_VRAM_MAX = 2 * GiB
VENDORS: dict[str, Literal["intel", "amd"]] = {"0x8086": "intel", "0x1002": "amd"}
# PCI device ids of AMD APUs' GPUs (Raven to Strix Halo); the VRAM rule covers the rest.
AMD_APU_DEVICE_IDS = frozenset(
    {
        0x15DD,  # Raven Ridge
        0x15D8,  # Picasso
        0x15E7,  # Barcelo
        0x1636,  # Renoir
        0x1638,  # Cezanne
        0x164C,  # Lucienne
        0x163F,  # Van Gogh (Steam Deck)
        0x1681,  # Rembrandt
        0x164E,  # Raphael (Ryzen 7000 desktop)
        0x1506,  # Mendocino
        0x15BF,  # Phoenix
        0x15C8,  # Phoenix 2
        0x150E,  # Strix Point
        0x1586,  # Strix Halo
    }
)
INTEL_IGPU_SLOT = "00:02.0"
_CARD = re.compile(r"card\d+")


@dataclass(frozen=True)
class DRMCard:
    """One display controller a kernel driver bound; ``vram`` in bytes, 0 when unknown."""

    card: str  # "card0"
    vendor: Literal["intel", "amd"]
    device_id: int
    slot: str  # PCI address, "0000:00:02.0"
    driver: str  # the kernel driver: "i915", "xe", "amdgpu"
    vram: int
    integrated: bool

    @property
    def pci_id(self) -> str:
        """``"8086:46a6"``, as ``lspci -nn`` prints it."""
        vendor = next(k for k, v in VENDORS.items() if v == self.vendor)
        return f"{vendor[2:]}:{self.device_id:04x}"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _uevent(device: Path) -> dict[str, str]:
    """``DRIVER=i915`` / ``PCI_SLOT_NAME=0000:00:02.0`` lines of the device's uevent."""
    out = {}
    for line in _read(device / "uevent").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def is_integrated(vendor: str, device_id: int, slot: str, vram: int) -> bool:
    """Whether a GPU shares system RAM (the module docstring says how it is told)."""
    if vendor == "intel":
        return slot.endswith(INTEL_IGPU_SLOT)
    if vendor == "amd":
        return device_id in AMD_APU_DEVICE_IDS or 0 < vram <= APU_VRAM_MAX
    return False


def card(folder: Path) -> DRMCard | None:
    """The card in ``folder`` (``.../drm/card0``) if it is an Intel or AMD display controller."""
    device = folder / "device"
    vendor = VENDORS.get(_read(device / "vendor").lower())
    # PCI class 0x03xxxx: VGA, 3D or other display controller (not audio, not a bridge).
    if vendor is None or not _read(device / "class").lower().startswith("0x03"):
        return None
    try:
        device_id = int(_read(device / "device"), 16)
    except ValueError:
        return None
    event = _uevent(device)
    vram_text = _read(device / "mem_info_vram_total")
    vram = int(vram_text) if vram_text.isdigit() else 0
    slot = event.get("PCI_SLOT_NAME", "")
    return DRMCard(
        card=folder.name,
        vendor=vendor,
        device_id=device_id,
        slot=slot,
        driver=event.get("DRIVER", ""),
        vram=vram,
        integrated=is_integrated(vendor, device_id, slot, vram),
    )


def cards(root: Path = Path("/")) -> list[DRMCard]:
    """Every Intel and AMD GPU under ``root``'s ``sys/class/drm``, one per PCI function."""
    drm = root / "sys/class/drm"
    if not drm.is_dir():
        return []
    out: list[DRMCard] = []
    seen: set[str] = set()
    for folder in sorted(drm.iterdir(), key=lambda p: p.name):
        if not _CARD.fullmatch(folder.name):
            continue  # connectors (card0-DP-1) and render nodes
        found = card(folder)
        key = (found.slot or found.card) if found else ""
        if found is not None and key not in seen:
            seen.add(key)
            out.append(found)
    return out
