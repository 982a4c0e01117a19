"""A CUDA-shaped pack without CUDA: a plugin that needs toolkit libraries from its runpath.

The C compiler makes a ``libggml-cuda.so`` that calls into a ``libcublas.so.99``
(which needs a ``libcublasLt.so.99``) found through a runpath into a "toolkit"
folder, and a cmake tree that says it built the plugin for ``90-real`` with
nvcc.  ``pack`` must carry both libraries, make every copy search only beside
itself, and take architectures and toolkit from the tree; ``install`` must
match them against the GPUs and lay the files out so that the plugin loads,
in a fresh process, with the builder's toolkit folder gone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from localllm.backends import elf, install, manifest, pack
from localllm.backends.pack import PackError

VERSION = "9.9.9"
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")


def cc(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([str(CC), "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    src.unlink()
    return out


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(tmp_path / "backends"))
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    kit = tmp_path / "toolkit" / "a" / "long" / "way" / "to" / "the" / "libraries"
    kit.mkdir(parents=True)
    cc(kit / "libcublasLt.so.99", "int lt(void) { return 40; }", "-Wl,-soname,libcublasLt.so.99")
    cc(
        kit / "libcublas.so.99",
        "extern int lt(void); int blas(void) { return lt() + 2; }",
        "-Wl,-soname,libcublas.so.99",
        f"-L{kit}",
        "-l:libcublasLt.so.99",
        "-Wl,-rpath,$ORIGIN",
        "-Wl,--disable-new-dtags",
    )  # DT_RPATH, as NVIDIA's wheels
    tree = tmp_path / "cache" / "build" / VERSION / "cuda"
    (tree / "bin").mkdir(parents=True)
    built = cc(
        tree / "bin" / "libggml-cuda.so",
        "extern int blas(void); int plugin_answer(void) { return blas(); }",
        f"-L{kit}",
        "-l:libcublas.so.99",
        f"-Wl,-rpath,{kit}",
        "-Wl,--enable-new-dtags",
    )
    (tree / "CMakeCache.txt").write_text(
        "CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_CUDA_ARCHITECTURES:STRING=90-real\n"
    )
    (tree / "CMakeFiles" / "3.28.3").mkdir(parents=True)
    (tree / "CMakeFiles" / "3.28.3" / "CMakeCUDACompiler.cmake").write_text(
        'set(CMAKE_CUDA_COMPILER_ID "NVIDIA")\nset(CMAKE_CUDA_COMPILER_VERSION "13.0.88")\n'
    )
    dest = tmp_path / "backends" / VERSION / "libggml-cuda.so"
    dest.parent.mkdir(parents=True)
    shutil.copy2(built, dest)
    return dest


def loads(plugin: Path) -> str:
    """In a fresh process: the plugin's answer and where libcublas came from."""
    code = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(plugin)!r})\n"
        "maps = open('/proc/self/maps').read().split()\n"
        "print(lib.plugin_answer(), [m for m in maps if 'libcublas.so' in m][0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_pack_carries_the_toolkit_libraries_and_loads_without_the_toolkit(
    plugin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = pack.make("cuda", ggml_version=VERSION, ggml_commit="abc1234", out=tmp_path)
    m = packed.manifest
    assert packed.path.name == f"cuda-ggml{VERSION}-{pack.platform_tag()}-sm90.tar.gz"
    assert m["architectures"] == ["90-real"] and m["toolkit"] == "CUDA 13.0.88 (nvcc)"
    assert set(m["files"]) == {
        "libggml-cuda.so",
        "cuda-libs/libcublas.so.99",
        "cuda-libs/libcublasLt.so.99",
    }
    with tarfile.open(packed.path) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    assert elf.read(tmp_path / "x" / "libggml-cuda.so").search == ["$ORIGIN/cuda-libs"]
    assert elf.read(tmp_path / "x" / "cuda-libs" / "libcublas.so.99").search == ["$ORIGIN"]

    shutil.rmtree(tmp_path / "toolkit")  # the other machine has only the driver
    plugin.unlink()
    monkeypatch.setattr(install, "trusted_table", lambda: {packed.sha256: "t"})
    with pytest.raises(
        PackError,
        match=r"built for 90-real, but this machine's GPUs are "
        r"89 \(89 not covered\)",
    ):
        install.install(packed.path, manifest.Core(VERSION, "abc1234", ["89"]))
    with pytest.raises(PackError, match=r"no GPU of this machine answered.*--arch"):
        install.install(packed.path, manifest.Core(VERSION, "abc1234", []))
    assert not plugin.exists()
    with pytest.raises(
        PackError,
        match=r"built with CUDA 13\.0\.88 \(nvcc\), and this NVIDIA "
        r"driver supports CUDA 12\.8: update the driver",
    ):
        install.install(packed.path, manifest.Core(VERSION, "abc1234", ["90"], cuda_driver="12.8"))
    done = install.install(
        packed.path, manifest.Core(VERSION, "abc1234-dirty", ["90"], cuda_driver="13.0")
    )
    answer, where = loads(done.plugin).split()
    assert answer == "42" and where == str(plugin.parent / "cuda-libs" / "libcublas.so.99")


def test_without_its_build_tree_the_architectures_must_be_given(
    plugin: Path, tmp_path: Path
) -> None:
    shutil.rmtree(tmp_path / "cache" / "build")
    with pytest.raises(PackError, match=r"cannot tell which GPU architectures.*--arch"):
        pack.make("cuda", ggml_version=VERSION, ggml_commit="", out=tmp_path)
    with pytest.raises(PackError, match="not cuda architectures"):
        pack.make("cuda", ggml_version=VERSION, ggml_commit="", out=tmp_path, arch="sm_90")
    packed = pack.make("cuda", ggml_version=VERSION, ggml_commit="", out=tmp_path, arch="90")
    assert packed.manifest["architectures"] == ["90"] and packed.manifest["toolkit"] == ""


def test_a_toolkit_library_nowhere_to_be_found_stops_the_pack(plugin: Path, tmp_path: Path) -> None:
    shutil.rmtree(tmp_path / "toolkit")
    with pytest.raises(PackError, match=r"needs libcublas\.so\.99, which is not in its search"):
        pack.make("cuda", ggml_version=VERSION, ggml_commit="", out=tmp_path)


def test_no_plugin_no_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(tmp_path / "backends"))
    with pytest.raises(PackError, match=r"no rpc plugin is installed.*backends build rpc"):
        pack.make("rpc", ggml_version=VERSION, ggml_commit="", out=tmp_path)


def test_a_search_path_is_only_rewritten_in_place(plugin: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.so"
    shutil.copy2(plugin, copy)
    before = elf.read(copy)
    with pytest.raises(elf.ElfError, match="cannot be rewritten in place"):
        elf.set_search_path(copy, "/" + "x" * 300)
    elf.set_search_path(copy, "$ORIGIN")
    after = elf.read(copy)
    assert after.search == ["$ORIGIN"] and after.needed == before.needed
    assert copy.stat().st_size == plugin.stat().st_size
    (tmp_path / "text.so").write_text("not an ELF file")
    with pytest.raises(elf.ElfError, match="not a 64-bit little-endian ELF"):
        elf.read(tmp_path / "text.so")
