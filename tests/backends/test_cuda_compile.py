"""The package-index CUDA toolkit, for real: it configures, compiles and links ggml-cuda objects.

Runs whenever the toolkit is installed (``localllm backends build cuda`` puts it
in ``<cache>/cuda/13.0-<machine>``; ``LOCALLLM_TEST_CUDA_CACHE`` names another
cache), and skips with that sentence when it is not: CI does not download
its half a gigabyte for every run (the download, unpacking and completing of
the tree are tested with stand-in wheels in test_cuda_install.py).  Any
system toolkit is hidden first (``PATH`` without any folder holding nvcc,
``CUDA_HOME`` pointing nowhere), so what compiles is the wheels' nvcc.

It configures the pinned llama.cpp with the flags ``backends build cuda``
uses for ``--arch 90``, compiles four ggml-cuda sources for sm_90 (the host
side, which calls cuBLAS and the driver, and three small kernels),
links them with cmake's own link line for the plugin (the rest of the objects
left out) against the core's libggml-base, and checks the result: it needs
libcudart.so.13, libcublas.so.13 and the driver's libcuda.so.1, searches only
``$ORIGIN/cuda-libs``, and finds the runtime there without LD_LIBRARY_PATH.
Where no driver is (here, CI), loading it says "no CUDA device".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from localllm.backends import build, catalog, elf, source, toolkit
from localllm.backends.cuda import runtime as cuda_runtime, wheels as cuda_wheels

# The backend's host side (cuBLAS and the driver's memory API: about 8 s on one core) and
# three small kernels (about 3 s each).
SOURCES = ("ggml-cuda", "arange", "scale", "clamp")


@pytest.fixture
def wheel_toolkit(monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = os.environ.get("LOCALLLM_TEST_CUDA_CACHE")
    if cache:
        monkeypatch.setenv("LOCALLLM_CACHE", cache)
    ws = cuda_wheels.SETS["13.0"]
    root = cuda_wheels.installed(ws)
    if root is None:
        pytest.skip(
            f"NVIDIA's CUDA {ws.cuda} wheels are not installed in "
            f"{cuda_wheels.root_for(ws)} (about 530 MB; 'localllm backends build cuda "
            "--arch 90 --yes' installs them, or set LOCALLLM_TEST_CUDA_CACHE)"
        )
    # Hide every system toolkit: no PATH folder with an nvcc, CUDA_HOME pointing nowhere.
    path = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "nvcc").exists()
    ]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    monkeypatch.setenv("CUDA_HOME", "/nonexistent-cuda")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    return root


def core_ggml_base() -> Path | None:
    from localllm.backends import core

    found = core.ggml_base()
    if found is not None:
        return found
    # A module built by an older localllm, against llama-cpp-python's libraries.
    spec = importlib.util.find_spec("llama_cpp")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder, "lib").glob("libggml-base.so*"))
        if found:
            return found[0]
    return None


def link_line(bdir: Path, objects: list[Path], out: Path) -> str:
    """cmake's link command of the plugin (a shell line, as ninja runs it), with only
    ``objects`` and the core's libggml-base."""
    text = subprocess.run(
        ["ninja", "-C", str(bdir), "-t", "commands", "bin/libggml-cuda.so"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    line = text.strip().splitlines()[-1]
    base = core_ggml_base()
    line = re.sub(r"\S+\.cu\.o\s", "", line)
    line = re.sub(r"\S*libggml-base\.so\S*", shlex.quote(str(base)) if base else "", line)
    objs = " ".join(shlex.quote(str(o)) for o in objects)
    return line.replace("-o bin/libggml-cuda.so", f"-o {shlex.quote(str(out))} {objs}")


def test_the_wheel_toolkit_compiles_and_links_ggml_cuda_for_sm_90(
    wheel_toolkit: Path, tmp_path: Path
) -> None:
    try:
        tree = source.ensure()
    except source.SourceError as exc:
        pytest.skip(f"the pinned llama.cpp source is not available: {exc}")
    kit = toolkit.check(catalog.get("cuda"), "90", install_tools=False)
    assert kit.wheels is not None, "a system nvcc was found: the test must not see one"
    args, env = cuda_wheels.cmake_args(wheel_toolkit, "cuda-libs")
    bdir = tmp_path / "build"
    full_env = {**os.environ, **kit.env, **env}
    subprocess.run(
        [
            kit.cmake,
            "-S",
            str(tree),
            "-B",
            str(bdir),
            f"-DCMAKE_MAKE_PROGRAM={kit.ninja}",
            *build.base_flags(catalog.get("cuda"), False),
            *kit.cmake_args,
            *args,
        ],
        check=True,
        capture_output=True,
        text=True,
        env=full_env,
    )
    cache = (bdir / "CMakeCache.txt").read_text()
    assert f"CMAKE_CUDA_COMPILER:STRING={wheel_toolkit}/bin/nvcc" in cache
    assert re.search(r"^CMAKE_CUDA_ARCHITECTURES:[A-Z]+=90-real$", cache, re.MULTILINE)
    assert "/usr/local/cuda" not in cache + (bdir / "build.ninja").read_text()
    rel = "ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir"
    objects = [bdir / rel / f"{name}.cu.o" for name in SOURCES]
    subprocess.run(
        [kit.ninja, "-C", str(bdir), "-j", "1", *(str(o.relative_to(bdir)) for o in objects)],
        check=True,
        capture_output=True,
        text=True,
        env=full_env,
    )
    assert all(o.stat().st_size > 0 for o in objects)
    plugin_dir = tmp_path / "backends" / "0.25.3"
    plugin_dir.mkdir(parents=True)
    plugin = plugin_dir / "libggml-cuda.so"
    subprocess.run(
        link_line(bdir, objects, plugin),
        shell=True,
        check=True,
        capture_output=True,
        text=True,
        env=full_env,
        cwd=bdir,
    )
    info = elf.read(plugin)
    assert {"libcudart.so.13", "libcublas.so.13", "libcuda.so.1"} <= set(info.needed)
    assert info.search == ["$ORIGIN/cuda-libs"]
    # What the build does next: the runtime beside the plugin, found there and nowhere else.
    cuda_wheels.install_runtime(wheel_toolkit, plugin_dir, "cuda-libs")
    assert [w for _, w in cuda_runtime.sources(plugin)] == [
        f"beside the plugin ({plugin_dir / 'cuda-libs'})"
    ] * 2
    if shutil.which("ldd"):
        out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
        for lib in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"):
            assert f"{lib} => {plugin_dir / 'cuda-libs' / lib}" in out, out
    base = core_ggml_base()
    if base is not None and ctypes.util.find_library("cuda") is None:
        ctypes.CDLL(str(base), mode=ctypes.RTLD_GLOBAL)  # as the engine has it, first
        with pytest.raises(OSError) as err:
            ctypes.CDLL(str(plugin))
        assert "libcuda.so.1" in str(err.value)
        assert cuda_runtime.no_device(cuda_runtime.explain(str(err.value), False, []))
