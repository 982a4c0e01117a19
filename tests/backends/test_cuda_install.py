"""backends.cuda.wheels.install against a package index on disk: pinned, private, complete.

Stand-in wheels with NVIDIA's layout (``nvidia/cu13/...``) are served from a
simple-API folder (``pip_index``: pip sees nothing else), and the pins are
swapped for theirs.  The real pip downloads them with ``--require-hashes``; a
wheel that differs from its pin is refused before anything of it is unpacked.
The tree gets what a toolkit install has and the wheels lack (``lib64``, the
``libX.so`` links, the driver stand-in built with the real compiler from the
wheels' ``cuda.h``), and nothing lands in a Python environment.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from localllm.backends import elf
from localllm.backends.cuda import unpack as cuda_unpack, wheels as cuda_wheels
from localllm.backends.cuda.wheels import CudaWheelError, Wheel, WheelSet
from tests.support.backend_build import CUDA_H

CONTENT: dict[str, dict[str, bytes]] = {
    "nvidia-cuda-nvcc": {"bin/nvcc": b"#!/bin/sh\necho nvcc\n"},
    "nvidia-nvvm": {"nvvm/bin/cicc": b"#!/bin/sh\n"},
    "nvidia-cuda-runtime": {
        "include/cuda.h": CUDA_H,
        "include/cuda_runtime.h": b"",
        "lib/libcudart.so.13": b"cudart",
    },
    "nvidia-cublas": {"lib/libcublas.so.13": b"cublas", "lib/libcublasLt.so.13": b"lt"},
}


def make_wheel(
    folder: Path,
    name: str,
    files: dict[str, bytes],
    extra: tuple[tuple[zipfile.ZipInfo, bytes], ...] = (),
) -> Path:
    dist = name.replace("-", "_")
    path = folder / f"{dist}-13.0.1-py3-none-any.whl"
    meta = f"{dist}-13.0.1.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        for rel, data in files.items():
            info = zipfile.ZipInfo(f"nvidia/cu13/{rel}")
            info.external_attr = (
                0o100755 if rel.startswith(("bin/", "nvvm/bin/")) else 0o100644
            ) << 16
            z.writestr(info, data)
        for info, data in extra:
            z.writestr(info, data)
        z.writestr("nvidia/__init__.py", b"")
        z.writestr(f"{meta}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 13.0.1\n")
        z.writestr(
            f"{meta}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{meta}/RECORD", "")
    return path


def serve(index: Path, wheel: Path, name: str) -> None:
    files = index / "files"
    files.mkdir(exist_ok=True)
    shutil.copy2(wheel, files / wheel.name)
    project = index / "simple" / name
    project.mkdir(parents=True, exist_ok=True)
    (project / "index.html").write_text(
        f'<html><body><a href="../../files/{wheel.name}">{wheel.name}</a></body></html>'
    )


def pin(monkeypatch: pytest.MonkeyPatch, wheels: dict[str, Path]) -> WheelSet:
    pins = tuple(
        Wheel(
            name,
            "13.0.1",
            {
                cuda_wheels.machine(): (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    path.stat().st_size,
                )
            },
        )
        for name, path in wheels.items()
    )
    ws = WheelSet("13.0", "cu13", "580", 75, 1000, pins)
    monkeypatch.setattr(cuda_wheels, "SETS", {"13.0": ws})
    return ws


@pytest.fixture
def wheels(pip_index: Path, tmp_path: Path) -> dict[str, Path]:
    made = tmp_path / "made"
    made.mkdir()
    out = {name: make_wheel(made, name, files) for name, files in CONTENT.items()}
    for name, path in out.items():
        serve(pip_index, path, name)
    return out


def cxx() -> str:
    found = shutil.which("c++")
    if not found:
        pytest.skip("no C++ compiler")
    return found


def test_the_pinned_wheels_become_a_complete_private_tree(
    wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ws = pin(monkeypatch, wheels)
    phases: list[tuple[str, int, int]] = []
    with open(tmp_path / "log", "w") as log:
        root = cuda_wheels.install(ws, cxx(), log, lambda *a: phases.append(a))
    assert (
        root
        == cuda_wheels.root_for(ws)
        == tmp_path / "cache" / "cuda" / f"13.0-{cuda_wheels.machine()}"
    )
    assert cuda_wheels.installed(ws) == root
    assert (root / "bin" / "nvcc").stat().st_mode & stat.S_IXUSR
    assert (root / "lib64").resolve() == (root / "lib").resolve()
    for lib in ("libcudart", "libcublas", "libcublasLt"):
        assert (root / "lib" / f"{lib}.so").readlink() == Path(f"{lib}.so.13")
    stub = root / "lib" / "stubs" / "libcuda.so"
    assert elf.read(stub).soname == "libcuda.so.1"
    declared = (root / "lib" / "stubs" / "libcuda-stub.c").read_text()
    for fn in ("cuInit", "cuMemAlloc_v2", "cuMemcpy", "cuMemcpy_ptds"):
        assert f"int {fn}(void)" in declared
    # Only the files below nvidia/cu13/, no metadata, no temporary folder left, no wheel kept.
    assert not (root / "__init__.py").exists() and not list(root.rglob("*.dist-info"))
    assert [p.name for p in root.parent.iterdir()] == [root.name]
    assert not list(tmp_path.glob("cache/**/*.whl"))
    assert ("toolkit", 0, 4) in phases and any(p[0] == "unpack" for p in phases)
    assert "--require-hashes" in (tmp_path / "log").read_text()
    assert not any(Path(p, "nvidia").exists() for p in sys.path if p)  # no environment touched
    # Installed once: a second build does not download again.
    with open(tmp_path / "log2", "w") as log:
        assert cuda_wheels.install(ws, cxx(), log) == root
    assert (tmp_path / "log2").read_text() == ""


def test_a_wheel_that_is_not_the_pinned_one_is_refused(
    wheels: dict[str, Path], pip_index: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ws = pin(monkeypatch, wheels)
    tampered = make_wheel(tmp_path, "nvidia-cublas", {"lib/libcublas.so.13": b"evil"})
    serve(pip_index, tampered, "nvidia-cublas")
    with (
        open(tmp_path / "log", "w") as log,
        pytest.raises(CudaWheelError, match="does not have the sha256 pinned"),
    ):
        cuda_wheels.install(ws, cxx(), log)
    assert cuda_wheels.installed(ws) is None
    assert not list((tmp_path / "cache" / "cuda").iterdir())


def test_an_index_without_the_wheels_is_a_sentence(
    wheels: dict[str, Path], pip_index: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ws = pin(monkeypatch, wheels)
    shutil.rmtree(pip_index / "simple" / "nvidia-nvvm")
    with (
        open(tmp_path / "log", "w") as log,
        pytest.raises(CudaWheelError, match=r"could not download the CUDA 13\.0 wheels"),
    ):
        cuda_wheels.install(ws, cxx(), log)


@pytest.mark.parametrize(
    "name, mode",
    [
        ("nvidia/cu13/../../escaped", 0o100644),
        ("nvidia/cu13/lib//abs", 0o100644),
        ("nvidia/cu13/lib/link.so", 0o120777),
        ("nvidia/cu13/lib/fifo", 0o010644),
    ],
)
def test_unsafe_members_are_refused(tmp_path: Path, name: str, mode: int) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    wheel = make_wheel(tmp_path, "nvidia-cublas", {}, ((info, b"/etc/passwd"),))
    with pytest.raises(CudaWheelError, match=f"refusing {wheel.name}"):
        cuda_unpack.unpack_wheel(wheel, "cu13", tmp_path / "tree")
    assert not (tmp_path / "escaped").exists()


def test_a_set_without_cicc_cannot_compile(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    cuda_unpack.unpack_wheel(
        make_wheel(tmp_path, "nvidia-cuda-nvcc", CONTENT["nvidia-cuda-nvcc"]), "cu13", tree
    )
    with pytest.raises(CudaWheelError, match="no nvvm/bin/cicc"):
        cuda_unpack.complete_tree(tree, "c++", io.StringIO())


def test_the_runtime_goes_beside_the_plugin_whole(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    for name, data in (
        ("libcudart.so.13", b"a"),
        ("libcublas.so.13", b"b"),
        ("libcublasLt.so.13", b"c"),
        ("libnvblas.so.13", b"d"),
        ("libcudart_static.a", b"e"),
    ):
        (root / "lib" / name).write_bytes(data)
    (root / "lib" / "libcudart.so").symlink_to("libcudart.so.13")
    folder = tmp_path / "backends" / "0.25.3"
    folder.mkdir(parents=True)
    (folder / "cuda-libs").mkdir()
    (folder / "cuda-libs" / "libcudart.so.12").write_bytes(b"old")
    dest = cuda_wheels.install_runtime(root, folder, "cuda-libs")
    assert dest == folder / "cuda-libs"
    assert sorted(p.name for p in dest.iterdir()) == [
        "libcublas.so.13",
        "libcublasLt.so.13",
        "libcudart.so.13",
    ]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o755 for p in [dest, *dest.iterdir()])
    assert sorted(p.name for p in folder.iterdir()) == ["cuda-libs"]  # nothing left over
