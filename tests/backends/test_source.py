"""backends.source: the pinned sdist is hash-checked, unpacked safely and atomically."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from localllm import paths
from localllm.backends import source
from tests.support.backend_build import CMAKE, make_tar


def test_unpacks_only_vendor_llama_cpp_without_models_and_docs(tmp_path: Path) -> None:
    tar = make_tar(
        tmp_path / "s.tar.gz",
        {
            "pkg-1/pyproject.toml": b"x",
            "pkg-1/vendor/llama.cpp/CMakeLists.txt": b"project(x)",
            "pkg-1/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE,
            "pkg-1/vendor/llama.cpp/models/big.gguf": b"0" * 1000,
            "pkg-1/vendor/llama.cpp/docs/a.md": b"doc",
        },
    )
    tree = source.unpack(tar, tmp_path / "tree")
    assert (tree / "CMakeLists.txt").read_bytes() == b"project(x)"
    assert not (tree / "models").exists() and not (tree / "docs").exists()
    assert not (tree / "pyproject.toml").exists()
    assert source.ggml_version_of(tree) == "0.25.3"
    # A second call reuses the finished tree.
    assert source.unpack(tar, tmp_path / "tree") == tree


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def make_tar_of(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            data = b"boom" if info.isfile() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


@pytest.fixture(params=["data_filter", "own_checks"])
def filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every unpack test twice: with tarfile's ``data`` filter, and without it as on
    Python 3.11.0-3.11.3, where only our own checks stand."""
    if request.param == "own_checks":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return str(request.param)


def unsafe_members(escape: Path) -> list[tarfile.TarInfo]:
    """Each one escapes the destination, or has no business in a source tarball."""
    v = "pkg/vendor/llama.cpp"
    return [
        # An empty part: "<dest>/" + "/abs/path" is "/abs/path" (issue #26).
        member(f"{v}/{escape}"),
        member(f"{v}/ggml//x.c"),
        member(f"{v}/../../../{escape.name}"),
        member(f"{v}/ggml/../../../../{escape.name}"),
        member(f"{v}/./ggml/x.c"),
        member(f"/{v}/x.c"),
        member(f"{v}\\..\\..\\{escape.name}"),
        member(f"C:{v}/x.c"),
        member(f"{v}/link", tarfile.SYMTYPE, f"../../../../{escape}"),
        member(f"{v}/link", tarfile.SYMTYPE, str(escape)),
        member(f"{v}/ggml/link", tarfile.SYMTYPE, "../../../../.."),
        member(f"{v}/hard", tarfile.LNKTYPE, f"../{escape.name}"),
        member(f"{v}/hard", tarfile.LNKTYPE, str(escape)),
        member(f"{v}/null", tarfile.CHRTYPE),
        member(f"{v}/disk", tarfile.BLKTYPE),
        member(f"{v}/pipe", tarfile.FIFOTYPE),
        # Outside vendor/llama.cpp too: a tampered tarball is refused whole.
        member(f"pkg//{escape}"),
        member("pkg/../evil"),
    ]


@pytest.mark.parametrize("index", range(len(unsafe_members(Path("/x")))))
def test_unsafe_members_are_refused_and_nothing_is_written(
    tmp_path: Path, filters: str, index: int
) -> None:
    escape = tmp_path / "escaped"
    bad = unsafe_members(escape)[index]
    tar = make_tar_of(tmp_path / "s.tar.gz", [member("pkg/vendor/llama.cpp/CMakeLists.txt"), bad])
    with pytest.raises(source.SourceError, match="unsafe path") as err:
        source.unpack(tar, tmp_path / "out" / "tree")
    assert repr(bad.name) in str(err.value)
    assert not escape.exists() and not (tmp_path / "evil").exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_links_inside_the_tree_and_a_dot_prefix_are_fine(tmp_path: Path, filters: str) -> None:
    tar = make_tar_of(
        tmp_path / "s.tar.gz",
        [
            member(".", tarfile.DIRTYPE),
            member("./pkg/vendor/llama.cpp/CMakeLists.txt"),
            member("./pkg/vendor/llama.cpp/ggml", tarfile.DIRTYPE),
            member("./pkg/vendor/llama.cpp/ggml/x.c"),
            member("./pkg/vendor/llama.cpp/ggml/link.c", tarfile.SYMTYPE, "x.c"),
            member("./pkg/vendor/llama.cpp/up.c", tarfile.SYMTYPE, "ggml/../ggml/x.c"),
        ],
    )
    tree = source.unpack(tar, tmp_path / "tree")
    assert (tree / "CMakeLists.txt").read_bytes() == b"boom"
    assert (tree / "ggml" / "x.c").read_bytes() == b"boom"
    # Links are never extracted: a build reads none.
    assert not (tree / "ggml" / "link.c").exists() and not (tree / "up.c").exists()


def test_a_version_without_a_pin_is_refused_unless_a_source_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a file already in the cache: nothing could tell whether it is the real one."""
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(source, "core_version", lambda: "9.9.9")
    cached = paths.cache() / "sdist" / "llama_cpp_python-9.9.9.tar.gz"
    cached.parent.mkdir(parents=True)
    make_tar(cached, {"p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE})
    for call in (lambda: source.fetch_sdist("9.9.9"), lambda: source.ensure()):
        with pytest.raises(source.SourceError, match=r"9\.9\.9 .*no pinned sha256") as err:
            call()
        assert "--source FILE" in str(err.value) and "llama-cpp-python==0.3.36" in str(err.value)
    assert not (paths.cache() / "source").exists()
    # The way out the message names: a file the user chose.
    tree = source.ensure(
        make_tar(tmp_path / "mine.tar.gz", {"p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE})
    )
    assert source.ggml_version_of(tree) == "0.25.3"


def test_a_tarball_without_llama_cpp_is_refused(tmp_path: Path) -> None:
    tar = make_tar(tmp_path / "s.tar.gz", {"other/README": b"x"})
    with pytest.raises(source.SourceError, match=r"no vendor/llama\.cpp"):
        source.unpack(tar, tmp_path / "tree")


def test_a_corrupt_cached_sdist_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    cached = paths.cache() / "sdist" / "llama_cpp_python-0.3.36.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the sdist")
    with pytest.raises(source.SourceError, match="expected 832db069"):
        source.fetch_sdist("0.3.36")
    assert not cached.exists()


def test_local_source_is_keyed_by_its_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    tar = make_tar(tmp_path / "s.tar.gz", {"p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE})
    tree = source.ensure(tar)
    assert tree.parent == paths.cache() / "source" and tree.name.startswith("local-")
    with pytest.raises(source.SourceError, match="no such file"):
        source.ensure(tmp_path / "missing.tar.gz")
