"""backends.catalog and backends.toolkit: which plugin a machine wants, and what a build needs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from localllm.backends import catalog, toolkit, vulkan_check
from localllm.backends.advice import wanted_backends
from localllm.errors import InvalidRequest
from localllm.hardware.probes import GPUProbe
from tests.support.backend_build import plant_pip

NVIDIA = GPUProbe("nvidia", "NVIDIA H100", "580.1")
AMD = GPUProbe("amd", "AMD Radeon RX 7900 XTX")


def test_each_vendor_wants_its_plugin_until_a_serving_library_is_loaded() -> None:
    (w,) = wanted_backends([NVIDIA, NVIDIA], set())
    assert w.backend is not None and w.command == "localllm backends build cuda"
    assert "NVIDIA H100, driver 580.1" in w.hint
    assert wanted_backends([NVIDIA], {"CUDA"}) == []
    assert wanted_backends([NVIDIA], {"Vulkan"}) == []
    assert wanted_backends([NVIDIA], {"RPC"})[0].command.endswith("cuda")
    (a,) = wanted_backends([AMD], set())
    assert a.command.endswith("rocm") and "vulkan" in a.hint
    (apple,) = wanted_backends([GPUProbe("apple", "Apple M3")], set())
    assert apple.backend is None and apple.command == ""
    assert wanted_backends([GPUProbe("apple", "Apple M3")], {"Metal"}) == []


def test_catalog_names_plugins_and_refuses_unknown_ones() -> None:
    assert catalog.get("CUDA").filename.startswith("libggml-cuda.")
    assert catalog.get("rpc").target == "ggml-rpc"
    with pytest.raises(InvalidRequest, match="cuda, rocm, vulkan, rpc"):
        catalog.get("opencl")


def test_cuda_architectures_from_nvidia_smi() -> None:
    assert toolkit.cuda_archs("8.9\n9.0\n8.9\n") == ["89", "90"]
    assert toolkit.cuda_archs("[N/A]\n") == []


def test_cuda_without_a_gpu_or_arch_says_to_pass_arch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.99'\n")
    nvcc.chmod(0o755)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cublas_v2.h").write_text("")
    monkeypatch.setenv("PATH", str(nvcc.parent))
    with pytest.raises(toolkit.ToolkitMissing, match="pass --arch"):
        toolkit.check_cuda(None)
    args, notes, env, wheels = toolkit.check_cuda("89,90")
    assert args[0] == "-DCMAKE_CUDA_ARCHITECTURES=89-real;90-real" and wheels is None
    assert "nvcc 12.4" in notes[0] and env["CUDACXX"] == str(nvcc)


def test_old_vulkan_headers_are_refused_before_compiling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Debian 12 ships 1.3.239, which lacks vk::LayerSettingEXT."""
    inc = tmp_path / "sdk" / "include" / "vulkan"
    inc.mkdir(parents=True)
    (inc / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 239\n")
    monkeypatch.setenv("VULKAN_SDK", str(tmp_path / "sdk"))
    assert vulkan_check.vulkan_header_version([str(tmp_path / "sdk" / "include")])[0] == 239
    with pytest.raises(toolkit.ToolkitMissing, match=r"1\.3\.239.*needs 1\.3\.261 or newer"):
        toolkit.check_vulkan()
    (inc / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 290\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(toolkit.ToolkitMissing, match="glslc"):
        toolkit.check_vulkan()


def test_rocm_without_hipcc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    with pytest.raises(toolkit.ToolkitMissing, match="hipcc"):
        toolkit.check_rocm(None)


def test_rpc_needs_only_a_compiler_and_the_build_tools() -> None:
    kit = toolkit.check(catalog.get("rpc"), install_tools=False)
    assert Path(kit.cmake).name == "cmake" and Path(kit.ninja).name == "ninja"
    assert kit.cmake_args == []


def test_installing_cmake_and_ninja_runs_pip_isolated_from_the_working_folder(
    pip_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "fake-pip-ran"
    plant_pip(tmp_path / "here", marker)
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    monkeypatch.setattr(toolkit, "_which", lambda name, *dirs: "")
    # The index is empty, so the real pip fails at once: nothing is installed.
    try:
        with pytest.raises(toolkit.ToolkitMissing, match="apt install cmake ninja-build"):
            toolkit.build_tools(True)
    finally:
        assert not marker.exists(), "the pip.py in the working folder ran"


def test_installing_cmake_and_ninja_is_announced_first(
    pip_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        toolkit, "_which", lambda name, *dirs: "/usr/bin/cmake" if name == "cmake" else ""
    )
    heard: list[str] = []
    with pytest.raises(toolkit.ToolkitMissing) as err:
        toolkit.build_tools(True, heard.append)
    (note,) = heard
    # What, where, and how not to: ninja only, into this Python, or install it yourself.
    assert note.startswith("ninja not found on PATH: installing ninja from the package index")
    assert f"({sys.prefix})" in note and "-I -m pip install --quiet ninja" in note
    assert "install them yourself" in note
    assert "installing them with pip failed" in str(err.value)
    heard.clear()
    with pytest.raises(toolkit.ToolkitMissing) as err:
        toolkit.build_tools(False, heard.append)
    assert heard == [] and "pip" not in str(err.value)


def test_tools_in_the_working_folder_are_not_picked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A "." or empty entry in PATH would find a cmake planted where the user stands."""
    here = tmp_path / "here"
    here.mkdir()
    fake = here / "cmake"
    fake.write_text("#!/bin/sh\necho planted\n")
    fake.chmod(0o755)
    monkeypatch.chdir(here)
    for path in (".", "", f".{os.pathsep}/nonexistent", f"{os.pathsep}/nonexistent"):
        monkeypatch.setenv("PATH", path)
        found = toolkit._which("cmake")
        assert found == "" or Path(found).resolve() != fake.resolve(), (path, found)
