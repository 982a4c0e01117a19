"""Smoke tests of the native binding: it loads, knows its build, sees a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.engine import binding
from localllm.errors import NativeUnavailable


def test_build_info_matches_installed_llama_cpp_python() -> None:
    import importlib.metadata

    info = binding.build_info()
    assert info["source"] == "llama-cpp-python"
    assert info["llama_cpp_python"] == importlib.metadata.version("llama-cpp-python")
    assert len(info["llama_h_sha256"]) == 64
    assert info["llama_version"]


def test_devices_include_a_cpu() -> None:
    from localllm.engine import plugins

    devs = plugins.devices()
    cpus = [d for d in devs if d.type == "cpu"]
    assert cpus, devs
    assert cpus[0].total > 0 and cpus[0].registry == "CPU" and cpus[0].name == "CPU"
    assert [d.index for d in devs] == list(range(len(devs)))
    assert info_has_ggml_version()


def info_has_ggml_version() -> bool:
    from localllm.engine import plugins

    version = plugins.ggml_version()
    return bool(version) and binding.build_info()["ggml_version"] == version


def test_stable_names_make_rpc_devices_mean_the_same_everywhere() -> None:
    from localllm.engine.plugins import stable_names

    assert stable_names([("CPU", "CPU", "AMD"), ("RPC3", "RPC", "10.0.0.2:50052"),
                         ("RPC4", "RPC", "10.0.0.2:50052"), ("CUDA0", "CUDA", "H100")]) == [
        "CPU", "RPC[10.0.0.2:50052]", "RPC[10.0.0.2:50052]#1", "CUDA0"]


def test_system_info_lists_cpu_features() -> None:
    assert "CPU" in binding.system_info()


def test_available() -> None:
    assert binding.available() == (True, "")


def test_version_mismatch_raises_native_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi, lib = binding.native()
    monkeypatch.setattr(binding.importlib.metadata, "version", lambda name: "0.0.1")
    with pytest.raises(NativeUnavailable) as err:
        binding._check(ffi, lib)
    assert "--force-reinstall" in err.value.message


def test_header_mismatch_raises_native_unavailable(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    ffi, lib = binding.native()
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "llama.h").write_text("/* another llama.cpp */\n")
    monkeypatch.setattr(binding, "_llama_cpp_dirs", lambda: (tmp_path / "llama_cpp", tmp_path))
    with pytest.raises(NativeUnavailable, match=r"llama\.h"):
        binding._check(ffi, lib)


def test_log_lines_are_captured(tmp_path: Path) -> None:
    from localllm.engine.model import Model
    from tests.tinymodel import make_tiny_model

    binding.take_log()
    with Model([str(make_tiny_model(tmp_path))], vocab_only=True) as m:
        assert "vocab" in m.load_log.lower() or "print_info" in m.load_log
        assert m.n_vocab == 330
