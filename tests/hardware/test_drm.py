"""Intel GPUs and AMD APUs from a fake DRM sysfs tree, and the plugin each is pointed to."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.backends import advice
from localllm.hardware import drm
from localllm.hardware.cpu import CPUInfo
from localllm.hardware.detect import build_hardware
from localllm.hardware.probes import GPUProbe, probe_all, probe_amd

GiB = 1024**3
CPU = CPUInfo("Test CPU", "x86_64", 8, 16, 64 * GiB, 40 * GiB, ("avx2",))
CPU_DEV = {"name": "CPU", "description": "Test CPU", "type": "cpu", "free": GiB, "total": GiB}


def add_card(
    root: Path,
    card: str,
    vendor: str,
    device: str,
    slot: str,
    driver: str,
    *,
    klass: str = "0x030000",
    vram: int | None = None,
) -> None:
    """``sys/class/drm/<card>/device`` as the kernel lays it out (a folder here, not a link)."""
    dev = root / "sys/class/drm" / card / "device"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "device").write_text(device + "\n")
    (dev / "class").write_text(klass + "\n")
    (dev / "uevent").write_text(f"DRIVER={driver}\nPCI_SLOT_NAME={slot}\nPCI_ID=x\n")
    if vram is not None:
        (dev / "mem_info_vram_total").write_text(f"{vram}\n")


def test_intel_igpu_arc_card_and_amd_apu_and_discrete_are_told_apart(tmp_path: Path) -> None:
    add_card(tmp_path, "card0", "0x8086", "0x46a6", "0000:00:02.0", "i915")
    add_card(tmp_path, "card1", "0x8086", "0x56a0", "0000:03:00.0", "xe")  # Arc A770
    add_card(tmp_path, "card2", "0x1002", "0x15bf", "0000:c4:00.0", "amdgpu", vram=4 * GiB)
    add_card(tmp_path, "card3", "0x1002", "0x744c", "0000:0a:00.0", "amdgpu", vram=24 * GiB)
    add_card(tmp_path, "card4", "0x1002", "0x1234", "0000:0b:00.0", "amdgpu", vram=512 << 20)
    # Not GPUs of ours: NVIDIA's (probe_nvidia), an audio function, a connector, a render node.
    add_card(tmp_path, "card5", "0x10de", "0x2684", "0000:01:00.0", "nvidia")
    add_card(tmp_path, "card6", "0x1002", "0xab28", "0000:0a:00.1", "snd", klass="0x040300")
    (tmp_path / "sys/class/drm/card0-DP-1").mkdir()
    (tmp_path / "sys/class/drm/renderD128").mkdir()
    cards = drm.cards(tmp_path)
    assert [(c.card, c.vendor, c.integrated) for c in cards] == [
        ("card0", "intel", True),
        ("card1", "intel", False),
        ("card2", "amd", True),  # Phoenix: a known APU although its carve-out is 4 GiB
        ("card3", "amd", False),  # RX 7900 XTX
        ("card4", "amd", True),  # unknown id, 512 MiB of VRAM: a carve-out
    ]
    assert cards[0].pci_id == "8086:46a6" and cards[0].driver == "i915"
    assert cards[3].vram == 24 * GiB
    gpus = [g for g in probe_all(tmp_path, lambda argv: None) if g.vendor != "apple"]
    assert [(g.vendor, g.name, g.integrated) for g in gpus] == [
        ("amd", "AMD integrated GPU (1002:15bf)", True),
        ("amd", "AMD GPU (1002:744c)", False),
        ("amd", "AMD integrated GPU (1002:1234)", True),
        ("intel", "Intel integrated GPU (8086:46a6)", True),
        ("intel", "Intel GPU (8086:56a0)", False),
    ]
    assert gpus[1].total == 24 * GiB and gpus[1].driver == "amdgpu"


def test_a_kfd_node_is_an_apu_when_it_has_cpu_cores_or_drm_says_so(tmp_path: Path) -> None:
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    (nodes / "1").mkdir(parents=True)
    (nodes / "1/properties").write_text(
        "cpu_cores_count 8\nsimd_count 24\ndevice_id 5567\ngfx_target_version 110003\n"
    )
    (nodes / "1/name").write_text("\n")
    (nodes / "2").mkdir()
    (nodes / "2/properties").write_text("simd_count 192\ndevice_id 29772\n")
    (nodes / "2/name").write_text("\n")
    (apu, card) = probe_amd(tmp_path, lambda argv: None, [])
    assert apu.integrated and apu.name == "AMD GPU (gfx1103)"
    assert not card.integrated
    # No CPU cores on the node, but DRM knows the same device id as an APU.
    (nodes / "1/properties").write_text("simd_count 24\ndevice_id 5567\n")
    add_card(tmp_path, "card0", "0x1002", "0x15bf", "0000:c4:00.0", "amdgpu", vram=GiB)
    assert probe_amd(tmp_path, lambda argv: None)[0].integrated


def test_apus_and_intel_gpus_are_pointed_to_vulkan_not_rocm() -> None:
    apu = GPUProbe("amd", "AMD Radeon 780M", integrated=True)
    intel = GPUProbe("intel", "Intel integrated GPU (8086:46a6)", integrated=True)
    card = GPUProbe("amd", "AMD Radeon RX 7900 XTX")
    hw = build_hardware({"ok": True, "devices": [CPU_DEV]}, CPU, [apu, intel, card])
    by_name = {w.gpu.name: w for w in advice.wanted(hw)}
    assert by_name["AMD Radeon 780M"].command == "localllm backends build vulkan"
    assert "rocm" not in by_name["AMD Radeon 780M"].hint
    assert "AMD integrated GPU found (AMD Radeon 780M)" in by_name["AMD Radeon 780M"].hint
    assert by_name["Intel integrated GPU (8086:46a6)"].command.endswith("build vulkan")
    assert by_name["AMD Radeon RX 7900 XTX"].command.endswith("build rocm")
    # A loaded Vulkan plugin serves all three.
    vk = {**CPU_DEV, "name": "Vulkan0", "type": "igpu"}
    served = build_hardware({"ok": True, "devices": [CPU_DEV, vk]}, CPU, [apu, intel, card])
    assert advice.wanted(served) == [] and advice.gpu_line(served) == ""
    line = advice.gpu_line(hw)
    assert line.count("\n") == 0 and "'localllm backends build vulkan'" in line


def test_get_is_named_when_a_trusted_pack_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.backends import install, manifest
    from localllm.backends.pack import platform_tag

    ggml = "0.9.4"
    table = {"a" * 64: f"cuda-ggml{ggml}-{platform_tag()}-sm80_sm90.tar.gz"}
    monkeypatch.setattr(install, "trusted_table", lambda: table)
    monkeypatch.setattr(manifest, "machine_archs", lambda backend: ["90"])
    advice.command_for.cache_clear()  # what it remembers of the real table
    nvidia = GPUProbe("nvidia", "NVIDIA H100")
    (w,) = advice.wanted_backends([nvidia], set(), ggml)
    assert w.command == "localllm backends get cuda" and "'localllm backends get cuda'" in w.hint
    assert "localllm backends get cuda" in w.line
    # Another ggml version, or GPUs the pack was not built for: build.
    assert advice.wanted_backends([nvidia], set(), "0.9.5")[0].command.endswith("build cuda")
    monkeypatch.setattr(manifest, "machine_archs", lambda backend: ["75"])
    advice.command_for.cache_clear()
    assert advice.wanted_backends([nvidia], set(), ggml)[0].command.endswith("build cuda")
    advice.command_for.cache_clear()  # the next test asks of the real table
