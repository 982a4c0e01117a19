"""backends.cuda.runtime and the CLI: where the CUDA runtime comes from, and "no CUDA device".

A stand-in CUDA plugin is linked here with the real compiler the way a
package-index build links the real one: against a driver stand-in with the
soname ``libcuda.so.1`` (``cuda_unpack.driver_stub``) and a ``libcudart.so.13``
in ``cuda-libs/`` beside it, runpath ``$ORIGIN/cuda-libs``.  On a machine
without the NVIDIA driver (CI, this one) loading it fails for want of
``libcuda.so.1``, which is what the real plugin does there: ``backends list``
and ``doctor`` must say "no CUDA device", not send anyone hunting a library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from localllm.backends.cuda import runtime as cuda_runtime, unpack as cuda_unpack
from localllm.backends.cuda.runtime import explain
from tests.support.backend_build import CUDA_H
from tests.support.daemon import REPO, run_cli

NO_DRIVER = ctypes.util.find_library("cuda") is None


def cc(*args: str) -> None:
    compiler = shutil.which("cc") or pytest.skip("no C compiler")
    subprocess.run([compiler, *args], check=True, capture_output=True)


def stand_in_plugin(folder: Path, tmp_path: Path) -> Path:
    """``folder/libggml-cuda.so`` needing libcudart.so.13 (beside it) and libcuda.so.1."""
    tree = tmp_path / "kit"
    (tree / "include").mkdir(parents=True)
    (tree / "include" / "cuda.h").write_bytes(CUDA_H)
    stub = cuda_unpack.driver_stub(tree, shutil.which("c++") or "c++", io.StringIO())
    libs = folder / "cuda-libs"
    libs.mkdir(parents=True)
    (tmp_path / "rt.c").write_text("int cudaFree(void *p) { return 0; }\n")
    cc(
        "-shared",
        "-fPIC",
        "-o",
        str(libs / "libcudart.so.13"),
        "-Wl,-soname,libcudart.so.13",
        str(tmp_path / "rt.c"),
    )
    (tmp_path / "plugin.c").write_text(
        "int cuInit(unsigned int); int cudaFree(void *);\n"
        "int ggml_backend_init(void) { return cuInit(0) + cudaFree(0); }\n"
    )
    plugin = folder / "libggml-cuda.so"
    cc(
        "-shared",
        "-fPIC",
        "-o",
        str(plugin),
        str(tmp_path / "plugin.c"),
        "-Wl,--no-as-needed",
        str(libs / "libcudart.so.13"),
        str(stub),
        "-Wl,-rpath,$ORIGIN/cuda-libs",
    )
    return plugin


def test_explain_names_the_reason_that_matters() -> None:
    dl = (
        "ggml_backend_load_best: failed to load /x/libggml-cuda.so: libcuda.so.1: cannot "
        "open shared object file: No such file or directory"
    )
    assert explain(dl, False, []).startswith("no CUDA device: this machine has no NVIDIA driver")
    assert explain("", True, []).startswith("no CUDA device: the plugin loaded, but")
    assert explain("", True, ["CUDA0"]) == ""
    missing = "failed to load: libcublas.so.13: cannot open shared object file"
    assert explain(missing, False, []).startswith(missing)
    assert "libcublas.so.13 is missing: run 'localllm backends build cuda'" in explain(
        missing, False, []
    )
    assert explain("something else", False, []) == "something else"


def test_the_runtime_beside_the_plugin_is_what_loads(tmp_path: Path) -> None:
    plugin = stand_in_plugin(tmp_path / "backends" / "0.25.3", tmp_path)
    assert cuda_runtime.sources(plugin) == [
        ("libcudart.so.13", f"beside the plugin ({plugin.parent / 'cuda-libs'})")
    ]
    assert cuda_runtime.describe(plugin).startswith("libcudart.so.13 from beside the plugin")
    if NO_DRIVER:
        with pytest.raises(OSError) as err:
            ctypes.CDLL(str(plugin))
        assert "libcuda.so.1" in str(err.value)  # cudart was found; only the driver is not
        assert explain(str(err.value), False, []).startswith("no CUDA device")


def test_a_plugin_that_needs_a_missing_runtime_says_not_found(tmp_path: Path) -> None:
    plugin = stand_in_plugin(tmp_path / "v", tmp_path)
    shutil.rmtree(plugin.parent / "cuda-libs")
    ((name, where),) = cuda_runtime.sources(plugin)
    assert name == "libcudart.so.13"
    assert "NOT FOUND" in where or "system's library path" in where


@pytest.mark.skipif(
    not NO_DRIVER,
    reason="this machine has the NVIDIA driver: the stand-in "
    "plugin would load it and be refused for what it is",
)
def test_list_and_doctor_say_no_cuda_device(rpc_backends: Path, tmp_path: Path) -> None:
    version = next(p.name for p in rpc_backends.iterdir() if p.is_dir())
    root = tmp_path / "backends"
    stand_in_plugin(root / version, tmp_path)
    env = dict(os.environ, LOCALLLM_BACKENDS=str(root))
    env.pop("LD_LIBRARY_PATH", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    out = run_cli("backends", "list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    cuda = {r["name"]: r for r in json.loads(out.stdout)}["cuda"]
    assert cuda["built"] and not cuda["loaded"]
    assert cuda["error"].startswith("no CUDA device: this machine has no NVIDIA driver")
    text = run_cli("backends", "list", env=env).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("cuda"))
    assert "no device" in line and "no CUDA device" in line and "FAILED" not in line
    out = run_cli("doctor", "--json", env=env)
    report = json.loads(out.stdout)
    assert report["cuda"]["state"].startswith("no CUDA device")
    assert "libcudart.so.13 from beside the plugin" in report["cuda"]["runtime"]
    text = run_cli("doctor", env=env).stdout
    assert "CUDA runtime: libcudart.so.13 from beside the plugin" in text


def test_build_without_a_toolkit_asks_and_a_script_must_say_yes(tmp_path: Path) -> None:
    """Not at a terminal and no --yes: the plan is printed and nothing is downloaded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("c++", "cmake", "ninja"):
        found = shutil.which(tool) or pytest.skip(f"{tool} is not installed")
        (bin_dir / tool).symlink_to(found)
    env = dict(
        os.environ,
        PATH=str(bin_dir),
        CUDA_HOME=str(tmp_path / "none"),
        LOCALLLM_CACHE=str(tmp_path / "cache"),
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    out = run_cli("backends", "build", "cuda", "--arch", "90", env=env)
    assert out.returncode == 1
    assert "Note: The CUDA plugin is built with NVIDIA's CUDA 13.0 compiler" in out.stderr
    assert "no CUDA toolkit (nvcc) on PATH" in out.stderr
    assert "nvidia-cublas 13.1.0.3" in out.stderr and "MB to download" in out.stderr
    assert "run the build again with --yes" in out.stderr
    assert not (tmp_path / "cache" / "cuda").exists()
    out = run_cli("backends", "build", "cuda", "--arch", "90", "--cuda", "12", env=env)
    assert out.returncode == 1 and "ptxas alone" in out.stderr
