"""backends.cuda.wheels and toolkit.check_cuda: which CUDA a machine with only the driver gets.

The choice is pure (driver version, ``--cuda``, architectures in; a pinned set
and the reason out); ``check_cuda`` is run against stand-in ``nvcc`` and
``nvidia-smi`` scripts on a PATH of the test's own, so the machine's real
toolkit (this one has nvcc 13 system-wide) is hidden the way a user's would be.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from localllm.backends import build, catalog, toolkit
from localllm.backends.cuda import wheels as cuda_wheels
from localllm.backends.cuda.wheels import CudaWheelError, choose

SMI_13 = "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0     |"
SMI_12 = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4     |"


def script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def bare_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding the compiler, cmake and ninja, and the test's stand-ins: no nvcc, no
    nvidia-smi unless put there."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("c++", "cmake", "ninja"):
        found = shutil.which(tool)
        if not found:
            pytest.skip(f"{tool} is not installed")
        (folder / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    return folder


def test_the_pins_are_the_six_wheels_for_both_linux_machines() -> None:
    ws = cuda_wheels.SETS["13.0"]
    assert [w.name for w in ws.wheels] == [
        "nvidia-cuda-nvcc",
        "nvidia-nvvm",
        "nvidia-cuda-crt",
        "nvidia-cuda-cccl",
        "nvidia-cuda-runtime",
        "nvidia-cublas",
    ]
    for w in ws.wheels:
        assert set(w.files) == {"x86_64", "aarch64"}
        for sha, size in w.files.values():
            assert re.fullmatch(r"[0-9a-f]{64}", sha) and size > 0
    assert ws.download_size("x86_64") == 527_617_427  # as the index lists them
    assert ws.folder == "cu13" and ws.min_arch == 75


def test_the_driver_chooses_and_says_why() -> None:
    assert cuda_wheels.driver_cuda(SMI_13) == (13, 0)
    assert cuda_wheels.driver_cuda("no banner") is None
    ws, why = choose(None, (13, 0), ["90"])
    assert ws.cuda == "13.0" and "driver's CUDA 13.0" in why
    assert choose(None, (14, 2), ["120a"])[0].cuda == "13.0"  # newer drivers run it
    ws, why = choose(None, None, ["90"])
    assert ws.cuda == "13.0" and "no driver answered nvidia-smi" in why and "580" in why
    ws, why = choose("13", None, ["90"])
    assert ws.cuda == "13.0" and "--cuda 13" in why
    assert choose("13.0", (13, 0), ["89"])[0].cuda == "13.0"


def test_a_cuda_12_driver_is_told_its_ways_out() -> None:
    with pytest.raises(CudaWheelError) as err:
        choose(None, (12, 4), ["89"])
    text = str(err.value)
    assert "CUDA 12.4" in text and "ptxas alone" in text and "580 or newer" in text
    assert "Vulkan" in text and "toolkit" in text
    with pytest.raises(CudaWheelError, match=r"--cuda 12: .*ptxas alone"):
        choose("12", None, ["89"])
    with pytest.raises(CudaWheelError, match="needs a driver 580 or newer"):
        choose("13", (12, 8), ["89"])
    with pytest.raises(CudaWheelError, match=r"knows CUDA 13\.0"):
        choose("13.9", None, ["90"])


def test_gpus_older_than_cuda_13_supports_are_refused() -> None:
    with pytest.raises(CudaWheelError, match=r"cannot compile for sm_61, sm_70 .*sm_75"):
        choose(None, (13, 0), ["61", "70", "90"])


def test_every_cuda_build_compiles_only_what_the_machine_runs() -> None:
    flags = toolkit.cuda_flags(["89", "90", "120a", "80-virtual"])
    assert flags[0] == "-DCMAKE_CUDA_ARCHITECTURES=89-real;90-real;120a-real;80-virtual"
    # The KV cache types localllm offers (f16 is always built), and no NCCL.
    assert "-DGGML_CUDA_FA_QUANTS=q8_0-q8_0;q4_0-q4_0" in flags
    assert "-DGGML_CUDA_NCCL=OFF" in flags


def test_a_system_nvcc_is_used_when_there_is_one(bare_path: Path) -> None:
    nvcc = script(bare_path, "nvcc", "echo 'Cuda compilation tools, release 12.4, V12.4.99'")
    (bare_path.parent / "include").mkdir()
    (bare_path.parent / "include" / "cublas_v2.h").write_text("")
    args, notes, env, wheels = toolkit.check_cuda("89,90")
    assert wheels is None and env["CUDACXX"] == str(nvcc) and "nvcc 12.4" in notes[0]
    assert args[0] == "-DCMAKE_CUDA_ARCHITECTURES=89-real;90-real"
    assert f"-DCMAKE_CUDA_COMPILER={nvcc}" in args  # a configured tree ignores CUDACXX
    assert "-DCMAKE_BUILD_WITH_INSTALL_RPATH=OFF" in args
    # Asking for another CUDA than the system's takes the package index's.
    *_, wheels = toolkit.check_cuda("90", cuda="13")
    assert wheels is not None and wheels[0].cuda == "13.0"


def test_a_system_nvcc_without_cublas_gives_way_to_the_package_index(bare_path: Path) -> None:
    """As on a machine with nvcc alone (this one): configuring would fail on CUDA::cublas."""
    script(bare_path, "nvcc", "echo 'Cuda compilation tools, release 13.0, V13.0.88'")
    script(bare_path, "nvidia-smi", f"echo '{SMI_13}'")
    _args, notes, env, wheels = toolkit.check_cuda("90")
    assert wheels is not None and wheels[0].cuda == "13.0" and env == {}
    assert "from the package index" in notes[0] and "has no cuBLAS (cublas_v2.h)" in notes[0]


def test_without_nvcc_the_package_index_set_is_planned(bare_path: Path) -> None:
    script(bare_path, "nvidia-smi", f"echo '{SMI_13}'")
    args, notes, env, wheels = toolkit.check_cuda("90")
    assert wheels is not None and wheels[0].cuda == "13.0"
    assert "driver's CUDA 13.0" in wheels[1] and env == {}
    assert "from the package index" in notes[0] and "no CUDA toolkit (nvcc)" in notes[0]
    assert args[0] == "-DCMAKE_CUDA_ARCHITECTURES=90-real"
    kit = toolkit.check(catalog.get("cuda"), "90", install_tools=False)
    assert kit.wheels is not None


def test_without_nvcc_a_cuda_12_driver_gets_a_sentence(bare_path: Path) -> None:
    script(bare_path, "nvidia-smi", f"echo '{SMI_12}'")
    with pytest.raises(toolkit.ToolkitMissing) as err:
        toolkit.check_cuda("89")
    assert str(err.value).startswith(
        "the CUDA plugin needs NVIDIA's compiler: no CUDA toolkit (nvcc) on PATH"
    )
    assert "CUDA 12.4" in str(err.value)


def test_the_plan_says_what_how_big_and_where() -> None:
    ws = cuda_wheels.SETS["13.0"]
    text = cuda_wheels.plan_text(ws, "for the driver's CUDA 13.0 (nvidia-smi)")
    for w in ws.wheels:
        assert f"{w.name} {w.version}" in text
    assert "MB to download" in text and "on disk in" in text
    assert str(cuda_wheels.root_for(ws)) in text and "no Python environment" in text
    assert "CUDA_HOME" in text


def test_the_download_is_asked_for_and_nothing_happens_without_a_yes(bare_path: Path) -> None:
    heard: list[str] = []
    asked: list[str] = []

    def refuse(text: str) -> bool:
        asked.append(text)
        return False

    for answer in (None, refuse):
        with pytest.raises(toolkit.ToolkitMissing, match="--yes"):
            build.build("cuda", arch="90", notice=heard.append, confirm=answer)
    assert asked and asked[0] in heard and "to download" in asked[0]
    assert not (bare_path.parent / "cache" / "cuda").exists()
    assert not (bare_path.parent / "cache" / "sdist").exists()  # nor the source
