"""Driver probes for GPUs the build may not use, on fake /proc and /sys trees."""

from __future__ import annotations

from pathlib import Path

from localllm.hardware.probes import (
    MiB,
    parse_nvidia_driver,
    parse_nvidia_smi,
    probe_all,
    probe_amd,
    probe_nvidia,
)

NV_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC "
    "2024\nGCC version:  gcc version 12.3.0\n"
)


def test_nvidia_driver_version() -> None:
    assert parse_nvidia_driver(NV_VERSION) == "550.54.14"
    open_kernel = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n"
    )
    assert parse_nvidia_driver(open_kernel) == "570.86.15"


def test_nvidia_smi_csv() -> None:
    gpus = parse_nvidia_smi(
        "NVIDIA GeForce RTX 4090, 24564, 23010\nNVIDIA A100, 81920, [N/A]\n", "550.54.14"
    )
    assert [g.name for g in gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA A100"]
    assert gpus[0].total == 24564 * MiB and gpus[0].free == 23010 * MiB
    assert gpus[1].free == 0 and gpus[0].driver == "550.54.14"


def test_probe_nvidia_with_and_without_the_tool(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def smi(argv: list[str]) -> str | None:
        calls.append(argv)
        return "NVIDIA L4, 23034, 22000\n" if argv[0] == "nvidia-smi" else None

    assert probe_nvidia(tmp_path, lambda argv: None) == []
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(NV_VERSION)
    gpus = probe_nvidia(tmp_path, smi)
    assert gpus[0].name == "NVIDIA L4" and gpus[0].driver == "550.54.14"
    assert "--format=csv,noheader,nounits" in calls[0]
    bare = probe_nvidia(tmp_path, lambda argv: None)  # driver but no nvidia-smi
    assert len(bare) == 1 and bare[0].driver == "550.54.14"


def test_amd_kfd_topology(tmp_path: Path) -> None:
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0/properties").write_text("cpu_cores_count 16\nsimd_count 0\n")
    gpu = nodes / "1"
    (gpu / "mem_banks/0").mkdir(parents=True)
    (gpu / "properties").write_text("simd_count 304\ngfx_target_version 90010\n")
    (gpu / "name").write_text("\n")
    (gpu / "mem_banks/0/properties").write_text(f"heap_type 1\nsize_in_bytes {64 * 1024**3}\n")
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.7.0\n")
    gpus = probe_amd(tmp_path, lambda argv: None)
    assert len(gpus) == 1
    assert gpus[0].name == "AMD GPU (gfx90a)" and gpus[0].total == 64 * 1024**3
    assert gpus[0].driver == "6.7.0"


def test_nothing_on_an_empty_root(tmp_path: Path) -> None:
    assert [g for g in probe_all(tmp_path, lambda argv: None) if g.vendor != "apple"] == []
