"""detect(): the native probe child, its failure modes, device mapping and hints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from localllm.backends.advice import hints
from localllm.hardware import detect as detect_mod
from localllm.hardware.cpu import CPUInfo
from localllm.hardware.detect import (
    build_hardware,
    detect,
    library_of,
    run_probe,
)
from localllm.hardware.probe_answer import parse_probe_output
from localllm.hardware.probes import GPUProbe

GiB = 1024**3
CPU = CPUInfo("Test CPU", "x86_64", 8, 16, 64 * GiB, 40 * GiB, ("avx2", "fma"))
CPU_DEV = {
    "name": "CPU",
    "description": "Test CPU",
    "type": "cpu",
    "free": 64 * GiB,
    "total": 64 * GiB,
}
CUDA_DEV = {
    "name": "CUDA0",
    "description": "NVIDIA GeForce RTX 4090",
    "type": "gpu",
    "free": 23 * GiB,
    "total": 24 * GiB,
}
NVIDIA = GPUProbe("nvidia", "NVIDIA GeForce RTX 4090", "550.54.14", 24 * GiB, 23 * GiB)


def test_library_names() -> None:
    assert [
        library_of(n) for n in ("CUDA0", "ROCm1", "Vulkan0", "Metal", "MTL0", "CPU", "BLAS")
    ] == ["CUDA", "ROCm", "Vulkan", "Metal", "Metal", "CPU", "BLAS"]


def test_native_devices_map_to_device() -> None:
    hw = build_hardware(
        {
            "ok": True,
            "devices": [CPU_DEV, CUDA_DEV],
            "system_info": "AVX2 = 1",
            "build_info": {"llama_cpp_python": "0.3.36"},
        },
        CPU,
        [NVIDIA],
    )
    assert hw.native_ok and hw.native_error == "" and hints(hw) == ()
    cuda = hw.gpus[0]
    assert (cuda.name, cuda.kind, cuda.library, cuda.free) == ("CUDA0", "gpu", "CUDA", 23 * GiB)
    # ggml reports total RAM as the CPU's free memory; MemAvailable is the truth.
    assert hw.devices[0].free == CPU.available_ram
    assert hw.build_info == {"llama_cpp_python": "0.3.36"}
    assert hw.to_dict()["devices"][1]["name"] == "CUDA0"


def test_gpu_present_without_its_plugin_names_the_one_build_command() -> None:
    hw = build_hardware({"ok": True, "devices": [CPU_DEV]}, CPU, [NVIDIA])
    assert len(hints(hw)) == 1
    hint = hints(hw)[0]
    assert "NVIDIA GPU found (NVIDIA GeForce RTX 4090, driver 550.54.14)" in hint
    assert "no NVIDIA CUDA plugin is loaded" in hint
    assert "'localllm backends build cuda'" in hint and "pip" not in hint
    amd = build_hardware(
        {"ok": True, "devices": [CPU_DEV]}, CPU, [GPUProbe("amd", "AMD Radeon RX 7900 XTX")]
    )
    assert "'localllm backends build rocm'" in hints(amd)[0]
    assert "'localllm backends build vulkan'" in hints(amd)[0]
    apple = build_hardware(
        {"ok": True, "devices": [CPU_DEV]}, CPU, [GPUProbe("apple", "Apple Silicon GPU")]
    )
    assert "no Metal" in hints(apple)[0]


def test_a_loaded_plugin_silences_the_hint_and_a_failed_one_is_reported() -> None:
    cuda = {
        "name": "CUDA0",
        "description": "RTX 4090",
        "type": "gpu",
        "free": GiB,
        "total": 2 * GiB,
    }
    ok = build_hardware({"ok": True, "devices": [CPU_DEV, cuda]}, CPU, [NVIDIA])
    assert hints(ok) == ()
    # Vulkan serves an NVIDIA card too: no CUDA hint then.
    vk = build_hardware(
        {"ok": True, "devices": [CPU_DEV, {**cuda, "name": "Vulkan0"}]}, CPU, [NVIDIA]
    )
    assert hints(vk) == ()
    failed = build_hardware(
        {
            "ok": True,
            "devices": [CPU_DEV],
            "plugins": [
                {
                    "file": "libggml-cuda.so",
                    "path": "/x/libggml-cuda.so",
                    "loaded": False,
                    "backend": "",
                    "error": "libcudart.so.12: cannot open shared object file",
                }
            ],
        },
        CPU,
        [NVIDIA],
    )
    assert any("libggml-cuda.so did not load: libcudart.so.12" in h for h in hints(failed))
    assert any("localllm backends build cuda" in h for h in hints(failed))


def test_rpc_workers_devices_join_the_device_list_as_gpus() -> None:
    from localllm.hardware.rpc import RemoteDevice, WorkerStatus

    ready = WorkerStatus(
        "10.0.0.2:50052", "ready", "7.0.0", (RemoteDevice("RPC[10.0.0.2:50052]", 5 * GiB, 8 * GiB),)
    )
    down = WorkerStatus("10.0.0.3:50052", "down", error="cannot connect")
    hw = build_hardware({"ok": True, "devices": [CPU_DEV]}, CPU, [], (ready, down))
    (gpu,) = hw.gpus
    assert (gpu.name, gpu.library, gpu.kind, gpu.free) == (
        "RPC[10.0.0.2:50052]",
        "RPC",
        "gpu",
        5 * GiB,
    )
    assert hw.workers == (ready, down)


def test_broken_native_module_falls_back_to_a_cpu_device() -> None:
    hw = build_hardware({"ok": False, "error": "ImportError: libllama.so: cannot open"}, CPU, [])
    assert not hw.native_ok and "libllama.so" in hw.native_error
    assert [d.name for d in hw.devices] == ["CPU"]
    assert hw.devices[0].free == CPU.available_ram and hw.devices[0].total == CPU.total_ram
    assert "native module is not usable" in hints(hw)[0] and "libllama.so" in hints(hw)[0]


def test_probe_output_parsing() -> None:
    assert parse_probe_output(0, 'noise\n{"ok": true, "devices": []}\n', "")["ok"] is True
    crash = parse_probe_output(-11, "", "ggml_cuda_init: failed\n")
    assert crash["ok"] is False and "SIGSEGV" in crash["error"]
    assert "ggml_cuda_init: failed" in crash["error"]
    assert "status 3" in parse_probe_output(3, "garbage", "")["error"]


@pytest.mark.parametrize(
    ("code", "expect"),
    [
        ("import time; time.sleep(10)", "timed out"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
    ],
)
def test_probe_child_failures_do_not_raise(code: str, expect: str) -> None:
    answer = run_probe(timeout=2, argv=[sys.executable, "-c", code])
    assert answer["ok"] is False and expect in answer["error"]


def test_real_probe_child_answers() -> None:
    answer = run_probe()
    assert isinstance(answer["ok"], bool)
    if answer["ok"]:
        assert any(d["type"] == "cpu" for d in answer["devices"])
        assert "llama_cpp_python" in answer["build_info"] or answer["build_info"]
    else:
        assert answer["error"]


def test_probe_loads_plugins_reports_refusals_and_adds_workers(
    rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real probe child with the RPC plugin, a bogus "CUDA plugin" and a dead worker."""
    import shutil

    (src,) = rpc_backends.glob("*/libggml-rpc.so")
    folder = tmp_path / "backends" / src.parent.name
    folder.mkdir(parents=True)
    shutil.copy2(src, folder / src.name)
    (folder / "libggml-cuda.so").write_bytes(b"\x7fELF not really a library")
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(tmp_path / "backends"))
    from tests.support.rpcworker import free_port

    dead = f"127.0.0.1:{free_port()}"
    answer = run_probe(argv=[sys.executable, "-m", "localllm.engine.probe_child", "--rpc", dead])
    assert answer["ok"], answer
    assert answer["ggml_version"] == src.parent.name
    by_file = {p["file"]: p for p in answer["plugins"]}
    assert by_file["libggml-rpc.so"]["loaded"] and by_file["libggml-rpc.so"]["backend"] == "RPC"
    cuda = by_file["libggml-cuda.so"]
    assert not cuda["loaded"] and cuda["error"]
    (worker,) = answer["workers"]
    assert worker["devices"] == 0 and dead in worker["error"]
    assert [d["name"] for d in answer["devices"]] == ["CPU"]


def test_detect_caches_until_refresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[float] = []

    def fake_probe(timeout: float = 30.0) -> dict[str, object]:
        calls.append(timeout)
        return {"ok": True, "devices": [CPU_DEV, CUDA_DEV]}

    monkeypatch.setattr(detect_mod, "run_probe", fake_probe)
    monkeypatch.setattr(detect_mod, "_cached", None)
    first = detect()
    assert detect() is first and len(calls) == 1
    assert detect(refresh=True) is not first and len(calls) == 2
    assert first.gpus[0].name == "CUDA0" and first.cpu.logical_cores >= 1


def test_refresh_memory_rereads_ram_and_reprobes_only_with_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [{"ok": True, "devices": [CPU_DEV]}]
    calls: list[float] = []

    def fake_probe(timeout: float = 30.0) -> dict[str, object]:
        calls.append(timeout)
        return answers[-1]

    monkeypatch.setattr(detect_mod, "run_probe", fake_probe)
    monkeypatch.setattr(detect_mod, "_cached", None)
    monkeypatch.setattr(detect_mod, "available_ram", lambda: 7 * GiB)
    hw = detect_mod.refresh_memory()
    assert len(calls) == 1  # the first detect(); no GPU, so no second probe
    assert hw.devices[0].free == 7 * GiB == hw.cpu.available_ram
    assert detect() is hw
    answers.append({"ok": True, "devices": [CPU_DEV, CUDA_DEV]})
    monkeypatch.setattr(detect_mod, "_cached", None)
    detect_mod.refresh_memory()
    assert len(calls) == 3  # GPUs: probe again for their free memory


def test_metal_is_reported_as_such_with_unified_memory() -> None:
    """No Mac here: the device ggml's Metal backend reports, as the probe passes it on."""
    metal = {
        "name": "MTL0",
        "description": "Apple M3 Max",
        "type": "gpu",
        "free": 40 * GiB,
        "total": 48 * GiB,
        "registry": "MTL",
    }
    hw = build_hardware(
        {"ok": True, "devices": [CPU_DEV, metal]}, CPU, [GPUProbe("apple", "Apple M3 Max")]
    )
    (gpu,) = hw.gpus
    assert gpu.library == "Metal" and gpu.unified_memory and gpu.is_gpu
    assert hints(hw) == ()  # Metal serves the Apple GPU: nothing to build
