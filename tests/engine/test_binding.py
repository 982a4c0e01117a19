"""Smoke tests of the native binding: it loads, knows its build, sees a CPU."""

from __future__ import annotations

from localllm.engine import binding


def test_build_info_matches_installed_llama_cpp_python() -> None:
    import importlib.metadata

    info = binding.build_info()
    assert info["source"] == "llama-cpp-python"
    assert info["llama_cpp_python"] == importlib.metadata.version("llama-cpp-python")
    assert len(info["llama_h_sha256"]) == 64
    assert info["llama_version"]


def test_devices_include_a_cpu() -> None:
    devs = binding.devices()
    cpus = [d for d in devs if d["type"] == "cpu"]
    assert cpus, devs
    assert cpus[0]["total"] > 0
    assert set(cpus[0]) == {"name", "description", "type", "free", "total"}


def test_system_info_lists_cpu_features() -> None:
    assert "CPU" in binding.system_info()


def test_available() -> None:
    assert binding.available() == (True, "")
