"""Smoke tests of the native binding: it loads, knows its build, sees a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.engine import binding
from localllm.errors import NativeUnavailable


def test_build_info_matches_the_core_beside_it() -> None:
    from localllm.backends import core, sdist

    info = binding.build_info()
    assert len(info["llama_h_sha256"]) == 64
    assert info["llama_version"]
    if info["source"] == "llama-cpp-python":
        pytest.skip("this module was built by an older localllm, against llama-cpp-python")
    assert info["source"] == "core"
    assert info["llama_cpp_python"] == sdist.VERSION == core.manifest()["version"]
    assert info["llama_h_sha256"] == core.manifest()["llama_h_sha256"]
    assert info["ggml_version"] == core.manifest()["ggml_version"]


class FakeFFI:
    @staticmethod
    def string(value: bytes) -> bytes:
        return value


class FakeLib:
    """The build-info calls of a native module built against ``source``."""

    def __init__(self, source: str, version: str = "0.3.36", header: str = "ab" * 32) -> None:
        self.source, self.version, self.header = source, version, header

    def ll_build_source(self) -> bytes:
        return self.source.encode()

    def ll_build_lcp_version(self) -> bytes:
        return self.version.encode()

    def ll_build_header_sha256(self) -> bytes:
        return self.header.encode()


def test_a_module_and_the_core_beside_it_must_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.backends import core

    monkeypatch.setattr(
        core,
        "manifest",
        lambda: {"llama_h_sha256": "ab" * 32, "package": "llama-cpp-python", "version": "0.3.36"},
    )
    binding._check(FakeFFI(), FakeLib("core"))
    with pytest.raises(NativeUnavailable, match="not the one the native module was built") as e:
        binding._check(FakeFFI(), FakeLib("core", header="cd" * 32))
    assert "--force-reinstall" in e.value.message
    monkeypatch.setattr(core, "manifest", dict)
    with pytest.raises(NativeUnavailable, match="core libraries are missing") as e:
        binding._check(FakeFFI(), FakeLib("core"))
    assert "--force-reinstall" in e.value.message


def test_a_prefix_build_is_not_checked_against_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.backends import core

    monkeypatch.setattr(core, "manifest", dict)
    binding._check(FakeFFI(), FakeLib("prefix:/opt/llama", version=""))


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

    assert stable_names(
        [
            ("CPU", "CPU", "AMD"),
            ("RPC3", "RPC", "10.0.0.2:50052"),
            ("RPC4", "RPC", "10.0.0.2:50052"),
            ("CUDA0", "CUDA", "H100"),
        ]
    ) == ["CPU", "RPC[10.0.0.2:50052]", "RPC[10.0.0.2:50052]#1", "CUDA0"]


def _dev(index: int, ggml_name: str, kind: str, registry: str) -> object:
    from localllm.engine.plugins import NativeDevice

    return NativeDevice(index, ggml_name, ggml_name, "", kind, 0, 0, registry)


@pytest.mark.parametrize(
    ("library", "want"),
    [
        ("", [1, 2, 3, 4]),
        ("cpu", [4]),
        ("cuda", [1, 4]),
        ("vulkan", [2, 4]),
        ("rocm", [3, 4]),
        ("metal", [4]),
    ],
)
def test_llm_library_narrows_what_a_load_is_given(
    monkeypatch: pytest.MonkeyPatch, library: str, want: list[int]
) -> None:
    # An empty device list means "every local GPU" (LoadOptions.devices); with
    # LOCALLLM_LLM_LIBRARY only that library's, as the planner plans (accelerators such
    # as BLAS compute in host memory and stay; workers only when planned on).
    from localllm.engine import plugins

    devs = [
        _dev(0, "CPU", "cpu", "CPU"),
        _dev(1, "CUDA0", "gpu", "CUDA"),
        _dev(2, "Vulkan0", "gpu", "Vulkan"),
        _dev(3, "ROCm0", "gpu", "ROCm"),
        _dev(4, "BLAS", "accel", "BLAS"),
        _dev(5, "RPC0", "gpu", "RPC[10.0.0.2:50052]"),
    ]
    monkeypatch.setattr(plugins, "devices", lambda: devs)
    monkeypatch.setenv("LOCALLLM_LLM_LIBRARY", library)
    assert plugins.local_offload_devices() == want


@pytest.mark.parametrize(
    ("level", "echo"),
    [("", False), ("0", False), ("-1", False), ("-2", False), ("1", True), ("2", True)],
)
def test_llama_log_is_echoed_only_at_debug_levels(
    monkeypatch: pytest.MonkeyPatch, level: str, echo: bool
) -> None:
    monkeypatch.setenv("LOCALLLM_DEBUG", level)
    assert binding.echo_log() is echo


def test_system_info_lists_cpu_features() -> None:
    assert "CPU" in binding.system_info()


def test_available() -> None:
    assert binding.available() == (True, "")


def test_an_older_module_needs_the_llama_cpp_python_it_was_built_against(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A module an older localllm built in the tree, against llama-cpp-python's libllama."""
    import importlib.metadata

    old = FakeLib("llama-cpp-python")
    monkeypatch.setattr(binding, "_llama_cpp_dirs", lambda: None)
    monkeypatch.setattr(binding.importlib.metadata, "version", lambda name: "0.3.36")
    binding._check(FakeFFI(), old)
    monkeypatch.setattr(binding.importlib.metadata, "version", lambda name: "0.0.1")
    with pytest.raises(NativeUnavailable) as err:
        binding._check(FakeFFI(), old)
    assert "--force-reinstall" in err.value.message

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(binding.importlib.metadata, "version", missing)
    with pytest.raises(NativeUnavailable, match="not installed"):
        binding._check(FakeFFI(), old)
    monkeypatch.setattr(binding.importlib.metadata, "version", lambda name: "0.3.36")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "llama.h").write_text("/* another llama.cpp */\n")
    monkeypatch.setattr(binding, "_llama_cpp_dirs", lambda: (tmp_path / "llama_cpp", tmp_path))
    with pytest.raises(NativeUnavailable, match=r"llama\.h"):
        binding._check(FakeFFI(), old)


def test_log_lines_are_captured(tmp_path: Path) -> None:
    from localllm.engine.model import Model
    from tests.support.tinymodel import make_tiny_model

    binding.take_log()
    with Model([str(make_tiny_model(tmp_path))], vocab_only=True) as m:
        assert "vocab" in m.load_log.lower() or "print_info" in m.load_log
        assert m.n_vocab == 330
