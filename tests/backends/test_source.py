"""backends.source: the pinned sdist is hash-checked, unpacked safely and atomically."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from localllm import paths
from localllm.backends import source

CMAKE = b"set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 25)\nset(GGML_VERSION_PATCH 3)\n"


def make_tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpacks_only_vendor_llama_cpp_without_models_and_docs(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "s.tar.gz", {
        "pkg-1/pyproject.toml": b"x",
        "pkg-1/vendor/llama.cpp/CMakeLists.txt": b"project(x)",
        "pkg-1/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE,
        "pkg-1/vendor/llama.cpp/models/big.gguf": b"0" * 1000,
        "pkg-1/vendor/llama.cpp/docs/a.md": b"doc",
    })
    tree = source.unpack(tar, tmp_path / "tree")
    assert (tree / "CMakeLists.txt").read_bytes() == b"project(x)"
    assert not (tree / "models").exists() and not (tree / "docs").exists()
    assert not (tree / "pyproject.toml").exists()
    assert source.ggml_version_of(tree) == "0.25.3"
    # A second call reuses the finished tree.
    assert source.unpack(tar, tmp_path / "tree") == tree


@pytest.mark.parametrize("name", ["pkg/vendor/llama.cpp/../../../evil", "/abs/vendor/llama.cpp/x"])
def test_unsafe_paths_are_refused_and_nothing_is_left(tmp_path: Path, name: str) -> None:
    tar = make_tar(tmp_path / "s.tar.gz", {"pkg/vendor/llama.cpp/CMakeLists.txt": b"x",
                                           name: b"boom"})
    with pytest.raises(source.SourceError, match="unsafe path"):
        source.unpack(tar, tmp_path / "tree")
    assert not (tmp_path / "tree").exists()
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_tarball_without_llama_cpp_is_refused(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "s.tar.gz", {"other/README": b"x"})
    with pytest.raises(source.SourceError, match=r"no vendor/llama\.cpp"):
        source.unpack(tar, tmp_path / "tree")


def test_a_corrupt_cached_sdist_is_removed(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    cached = paths.cache() / "sdist" / "llama_cpp_python-0.3.36.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the sdist")
    with pytest.raises(source.SourceError, match="expected 832db069"):
        source.fetch_sdist("0.3.36")
    assert not cached.exists()


def test_local_source_is_keyed_by_its_hash(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    tar = make_tar(tmp_path / "s.tar.gz", {"p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE})
    tree = source.ensure(tar)
    assert tree.parent == paths.cache() / "source" and tree.name.startswith("local-")
    with pytest.raises(source.SourceError, match="no such file"):
        source.ensure(tmp_path / "missing.tar.gz")
