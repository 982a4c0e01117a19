"""A CUDA pack that names NVIDIA's runtime wheels instead of carrying cuBLAS and the runtime.

The libraries are small stand-ins built here with the C compiler, under the
sonames the real ones have (``libcublas.so.13`` needs ``libcublasLt.so.13``,
found beside it as in NVIDIA's wheels), and the wheels are real wheel files in a
folder that pip reads with ``--no-index --find-links``: the pack names them,
the install fetches them through pip with their sha256 pinned into the cache,
and a fresh process loads them the way the runner does (``preload``, then the
plugin) with no toolkit and no ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from localllm.backends import install, manifest, pack
from localllm.backends.cuda import runtime as cuda_runtime, runtime_wheels
from localllm.backends.cuda.runtime_wheels import RuntimePin
from localllm.backends.cuda.wheels import machine
from localllm.backends.layout import runtime_dir
from localllm.backends.manifest import PackError

VERSION = "9.9.9"
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")


def cc(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([str(CC), "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    src.unlink()
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def runtime_libs(kit: Path, answer: int = 40) -> None:
    """libcudart, libcublasLt and libcublas (which needs Lt, found through $ORIGIN)."""
    kit.mkdir(parents=True, exist_ok=True)
    cc(kit / "libcudart.so.13", "int rt(void) { return 1; }", "-Wl,-soname,libcudart.so.13")
    cc(
        kit / "libcublasLt.so.13",
        f"int lt(void) {{ return {answer}; }}",
        "-Wl,-soname,libcublasLt.so.13",
    )
    cc(
        kit / "libcublas.so.13",
        "extern int lt(void); int blas(void) { return lt() + 1; }",
        "-Wl,-soname,libcublas.so.13",
        f"-L{kit}",
        "-l:libcublasLt.so.13",
        "-Wl,-rpath,$ORIGIN",
    )


def wheel(out_dir: Path, name: str, version: str, libs: list[Path]) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    path = out_dir / f"{dist}-py3-none-any.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for lib in libs:
            z.write(lib, f"nvidia/cu13/lib/{lib.name}")
        z.writestr(
            f"{dist}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        )
        z.writestr(
            f"{dist}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def pins(rt: Path, blas: Path, lib_sha: bool) -> dict[int, tuple[RuntimePin, ...]]:
    kit = rt.parent.parent / "kit"
    known = {n: sha(kit / n) for n in ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13")}
    return {
        13: (
            RuntimePin(
                "nvidia-cuda-runtime",
                "13.0.96",
                "nvidia/cu13/lib",
                ("libcudart.so.13",),
                {machine(): sha(rt)},
                {machine(): known} if lib_sha else {},
            ),
            RuntimePin(
                "nvidia-cublas",
                "13.1.0.3",
                "nvidia/cu13/lib",
                ("libcublasLt.so.13", "libcublas.so.13"),
                {machine(): sha(blas)},
                {machine(): known} if lib_sha else {},
            ),
        )
    }


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_index: Path) -> Path:
    """A CUDA plugin as a build leaves it (libraries beside the toolkit, build tree with
    its facts), the runtime wheels in a wheelhouse, and the pins naming them."""
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(tmp_path / "backends"))
    kit = tmp_path / "kit"
    runtime_libs(kit)
    house = tmp_path / "wheelhouse"
    rt = wheel(house, "nvidia-cuda-runtime", "13.0.96", [kit / "libcudart.so.13"])
    blas = wheel(
        house, "nvidia-cublas", "13.1.0.3", [kit / "libcublasLt.so.13", kit / "libcublas.so.13"]
    )
    monkeypatch.setattr(runtime_wheels, "PINNED", pins(rt, blas, lib_sha=False))
    tree = tmp_path / "cache" / "build" / VERSION / "cuda"
    (tree / "bin").mkdir(parents=True)
    cc(
        tree / "bin" / "libggml-cuda.so",
        "extern int blas(void); extern int rt(void);"
        " int plugin_answer(void) { return blas() + rt(); }",
        f"-L{kit}",
        "-l:libcublas.so.13",
        "-l:libcudart.so.13",
        f"-Wl,-rpath,{kit}",
        "-Wl,--enable-new-dtags",
    )
    (tree / "CMakeCache.txt").write_text("CMAKE_CUDA_ARCHITECTURES:STRING=90-real\n")
    (tree / "CMakeFiles" / "3.28.3").mkdir(parents=True)
    (tree / "CMakeFiles" / "3.28.3" / "CMakeCUDACompiler.cmake").write_text(
        'set(CMAKE_CUDA_COMPILER_ID "NVIDIA")\nset(CMAKE_CUDA_COMPILER_VERSION "13.0.88")\n'
    )
    dest = tmp_path / "backends" / VERSION / "libggml-cuda.so"
    dest.parent.mkdir(parents=True)
    shutil.copy2(tree / "bin" / "libggml-cuda.so", dest)
    return dest


def make_pack(plugin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pack.Packed:
    packed = pack.make("cuda", ggml_version=VERSION, ggml_commit="abc1234", out=tmp_path / "out")
    monkeypatch.setattr(install, "trusted_table", lambda: {packed.sha256: "t"})
    shutil.rmtree(tmp_path / "kit")  # the other machine has only the driver
    plugin.unlink()
    return packed


def core(driver: str = "13.0") -> manifest.Core:
    return manifest.Core(VERSION, "abc1234", ["90"], cuda_driver=driver)


def loads(plugin: Path, env: dict[str, str]) -> str:
    """In a fresh process, as the runner does: the runtime first, then the plugin."""
    code = (
        "import ctypes, sys\n"
        "from pathlib import Path\n"
        "from localllm.backends.cuda.runtime_wheels import preload\n"
        f"why = preload(Path({str(plugin)!r}))\n"
        "if why: sys.exit(why)\n"
        f"lib = ctypes.CDLL({str(plugin)!r})\n"
        "maps = open('/proc/self/maps').read().split()\n"
        "print(lib.plugin_answer(), [m for m in maps if 'libcublasLt.so' in m][0])\n"
    )
    env = {**os.environ, **env}
    env.pop("LD_LIBRARY_PATH", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_pack_names_the_wheels_and_the_install_fetches_them_once(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = make_pack(built, tmp_path, monkeypatch)
    m = packed.manifest
    assert set(m["files"]) == {"libggml-cuda.so"}  # nothing of the toolkit travels
    assert m["format"] == 2 and m["runtime"]["cuda"] == 13
    assert [(w["name"], w["version"]) for w in m["runtime"]["wheels"]] == [
        ("nvidia-cuda-runtime", "13.0.96"),
        ("nvidia-cublas", "13.1.0.3"),
    ]
    with tarfile.open(packed.path) as tar:
        assert tar.getnames() == ["manifest.json", "libggml-cuda.so"]

    done = install.install(packed.path, core(), wheels=tmp_path / "wheelhouse")
    assert [line.split(":")[0] for line in done.runtime] == [
        "nvidia-cuda-runtime 13.0.96",
        "nvidia-cublas 13.1.0.3",
    ]
    blas_dir = runtime_dir("nvidia-cublas", "13.1.0.3")
    assert sorted(p.name for p in blas_dir.iterdir()) == [
        ".complete",
        "libcublas.so.13",
        "libcublasLt.so.13",
    ]
    libs, why = runtime_wheels.libraries_for(done.plugin)
    assert why == "" and [p.name for p in libs] == [
        "libcudart.so.13",
        "libcublasLt.so.13",
        "libcublas.so.13",
    ]
    env = {
        "LOCALLLM_CACHE": str(tmp_path / "cache"),
        "LOCALLLM_BACKENDS": str(tmp_path / "backends"),
    }
    answer, where = loads(done.plugin, env).split()
    assert answer == "42" and where == str(blas_dir / "libcublasLt.so.13")
    assert "localllm's CUDA runtime" in cuda_runtime.describe(done.plugin)

    # A second install finds them in the cache: no wheelhouse, no index needed.
    again = install.install(packed.path, core())
    assert all("already in" in line for line in again.runtime)
    # Packed again from what the install left (no toolkit here): the same wheels named.
    repacked = pack.make("cuda", ggml_version=VERSION, ggml_commit="abc1234", out=tmp_path / "re")
    assert repacked.manifest["runtime"] == m["runtime"]
    assert set(repacked.manifest["files"]) == {"libggml-cuda.so"}

    # A cleared cache is said, with the way back, instead of a loader error.
    shutil.rmtree(tmp_path / "cache" / "cuda-runtime")
    _, why = runtime_wheels.libraries_for(again.plugin)
    assert "nvidia-cuda-runtime 13.0.96" in why and "install the pack again" in why


def test_a_wheel_that_is_not_the_pinned_one_is_refused(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = make_pack(built, tmp_path, monkeypatch)
    other = tmp_path / "other-kit"
    runtime_libs(other, answer=666)  # same names and sonames, other code
    wheel(
        tmp_path / "wheelhouse",
        "nvidia-cublas",
        "13.1.0.3",
        [other / "libcublasLt.so.13", other / "libcublas.so.13"],
    )
    with pytest.raises(PackError, match="does not have the sha256 pinned"):
        install.install(packed.path, core(), wheels=tmp_path / "wheelhouse")
    assert not built.exists() and not runtime_dir("nvidia-cublas", "13.1.0.3").exists()


def test_an_environment_with_the_wheels_installed_is_checked_file_by_file(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    shutil.copytree(tmp_path / "kit", site / "nvidia" / "cu13" / "lib")
    for dist in ("nvidia_cuda_runtime-13.0.96", "nvidia_cublas-13.1.0.3"):
        (site / f"{dist}.dist-info").mkdir()
    house = tmp_path / "wheelhouse"
    rt, blas = sorted(house.glob("*runtime*.whl"))[0], sorted(house.glob("*cublas*.whl"))[0]
    monkeypatch.setattr(runtime_wheels, "PINNED", pins(rt, blas, lib_sha=False))
    without = make_pack(built, tmp_path, monkeypatch)
    with pytest.raises(PackError, match=r"gives no sha256 for libcudart\.so\.13"):
        install.install(without.path, core(), wheels=site)

    # Packed with the files' sha256s (as the pins of the real wheels carry them).
    runtime_libs(tmp_path / "kit")  # the same sources at the same paths: the same bytes
    monkeypatch.setattr(runtime_wheels, "PINNED", pins(rt, blas, lib_sha=True))
    shutil.copy2(tmp_path / "cache" / "build" / VERSION / "cuda" / "bin" / built.name, built)
    packed = make_pack(built, tmp_path, monkeypatch)
    target = site / "nvidia" / "cu13" / "lib" / "libcublas.so.13"
    good = target.read_bytes()
    target.write_bytes(b"\x7fELF planted")
    with pytest.raises(PackError, match=r"libcublas\.so\.13 from the environment .* does not have"):
        install.install(packed.path, core(), wheels=site)
    assert not built.exists() and not runtime_dir("nvidia-cublas", "13.1.0.3").exists()
    target.write_bytes(good)
    done = install.install(packed.path, core(), wheels=site)
    assert done.runtime[-1] == f"nvidia-cublas 13.1.0.3: installed from the environment {site}"


def test_cuda_12_sonames_name_the_cu12_wheels_and_need_a_cuda_12_driver(tmp_path: Path) -> None:
    carry = {
        n: tmp_path / n
        for n in ("libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libfoo.so.1")
    }
    runtime, rest = runtime_wheels.for_pack(carry)
    assert runtime is not None and runtime["cuda"] == 12
    assert [w["name"] for w in runtime["wheels"]] == [
        "nvidia-cuda-runtime-cu12",
        "nvidia-cublas-cu12",
    ]
    assert runtime["wheels"][1]["folder"] == "nvidia/cublas/lib"
    assert list(rest) == ["libfoo.so.1"]  # what no wheel holds still travels
    # Sonames of a CUDA no wheel is pinned for: carried, as before.
    odd = {n: tmp_path / n for n in ("libcublas.so.99", "libcublasLt.so.99")}
    assert runtime_wheels.for_pack(odd) == (None, odd)

    m = json.loads(
        json.dumps(
            {
                "format": 2,
                "backend": "cuda",
                "plugin": "libggml-cuda.so",
                "ggml_version": VERSION,
                "ggml_commit": "abc1234",
                "architectures": ["90-real"],
                "toolkit": "CUDA 12.4.131 (nvcc)",
                "platform": pack.platform_tag(),
                "libs_folder": "cuda-libs",
                "system_libs": [],
                "made_by": "tests",
                "files": {"libggml-cuda.so": {"sha256": "0" * 64, "size": 1}},
                "runtime": runtime,
            }
        )
    )
    checked = manifest.check_manifest(m)
    manifest.check_fits(checked, core("12.2"))  # minor version compatibility
    cu13 = {**checked, "runtime": {**runtime, "cuda": 13}}
    with pytest.raises(PackError, match=r"supports CUDA 12\.2: update the driver"):
        manifest.check_fits(manifest.check_manifest(cu13), core("12.2"))
    bad = {
        **checked,
        "runtime": {**runtime, "wheels": [{**runtime["wheels"][0], "folder": "../x"}]},
    }
    with pytest.raises(PackError, match=r"runtime wheel .* is malformed"):
        manifest.check_manifest(bad)
