"""backends.build: a failed build installs nothing and keeps the previous plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm import paths
from localllm.backends import build
from tests.support.backend_build import CMAKE, make_tar


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(tmp_path / "backends"))
    return tmp_path


def test_a_failing_configure_installs_nothing_and_keeps_the_old_plugin(dirs: Path) -> None:
    old = paths.backends() / "0.25.3" / "libggml-rpc.so"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"previous plugin")
    tar = make_tar(
        dirs / "broken.tar.gz",
        {
            "p/vendor/llama.cpp/CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\n"
            b'project(x C)\nmessage(FATAL_ERROR "broken")\n',
            "p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE,
        },
    )
    phases: list[str] = []
    with pytest.raises(build.BuildFailed, match="configure failed") as err:
        build.build(
            "rpc",
            source_file=tar,
            core_ggml="0.25.3",
            progress=lambda phase, done, total: phases.append(phase),
        )
    assert "backend-build-rpc.log" in str(err.value)
    assert old.read_bytes() == b"previous plugin"
    assert [p.name for p in old.parent.iterdir()] == ["libggml-rpc.so"]
    assert "broken" in build.build_log_path("rpc").read_text()
    assert phases[:2] == ["source", "configure"]


def test_a_relative_cache_folder_still_finds_the_tree(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cmake runs in the cache folder, not the working one: its paths must be absolute."""
    monkeypatch.chdir(dirs)
    monkeypatch.setenv("LOCALLLM_CACHE", "relative-cache")
    tar = make_tar(
        dirs / "broken.tar.gz",
        {
            "p/vendor/llama.cpp/CMakeLists.txt": b"cmake_minimum_required(VERSION 3.14)\n"
            b'project(x C)\nmessage(FATAL_ERROR "broken")\n',
            "p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE,
        },
    )
    with pytest.raises(build.BuildFailed, match=r"configure failed \(exit 1\): CMake Error at"):
        build.build("rpc", source_file=tar, core_ggml="0.25.3")
    assert "broken" in build.build_log_path("rpc").read_text()
    assert (dirs / "relative-cache" / "build" / "0.25.3" / "rpc" / "CMakeCache.txt").exists()


def test_a_source_of_another_ggml_version_is_refused_before_building(dirs: Path) -> None:
    tar = make_tar(dirs / "other.tar.gz", {"p/vendor/llama.cpp/ggml/CMakeLists.txt": CMAKE})
    with pytest.raises(build.BuildFailed, match=r"ggml 0\.25\.3 but the installed core is ggml 9"):
        build.build("rpc", source_file=tar, core_ggml="9.0.0")
    assert not paths.backends().exists()


def test_install_is_a_rename(tmp_path: Path) -> None:
    src = tmp_path / "built.so"
    src.write_bytes(b"new")
    dest = tmp_path / "out" / "libggml-rpc.so"
    build.install_atomically(src, dest)
    assert dest.read_bytes() == b"new" and [p.name for p in dest.parent.iterdir()] == [dest.name]
