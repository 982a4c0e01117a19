"""native/core_build.py: the core's cache key, its cache folder, reuse and installation.

The build itself (minutes) is not run here: the install that made this test
environment ran it, and ``test_the_installed_core_*`` check what it left.  The
module is loaded by path, as setup.py loads it in pip's build environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from localllm import paths
from localllm.backends import core, sdist

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cb() -> ModuleType:
    name = "_localllm_core_build"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "native" / "core_build.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_build_uses_the_same_pins_as_the_plugins(cb: ModuleType) -> None:
    """One copy of the pins: the build loads the very file the package imports."""
    loaded = cb.sdist()
    assert Path(loaded.__file__).resolve() == Path(sdist.__file__).resolve()
    assert loaded.PINNED_SHA256 == sdist.PINNED_SHA256 and loaded.VERSION == sdist.VERSION
    assert sdist.VERSION in sdist.PINNED_SHA256


@pytest.mark.parametrize("value", ["", "  ", "/tmp/x-cache", " ~/c "])
def test_the_cache_folder_follows_localllm_paths(
    cb: ModuleType, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", value)
    assert cb.cache_root() == paths.cache()


def test_without_the_setting_it_is_the_platform_cache(
    cb: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALLLM_CACHE", raising=False)
    want = paths.cache()
    assert cb.cache_root() == want
    # The build environment may lack platformdirs (--no-build-isolation): the same folder.
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    assert cb.cache_root() == want


def test_the_flags_setting_is_localllm_s(cb: ModuleType) -> None:
    from localllm import config

    assert cb.CMAKE_ARGS_ENV == config.CORE_CMAKE_ARGS.name


def test_only_what_localllm_loads_is_configured(
    cb: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cb.CMAKE_ARGS_ENV, raising=False)
    args = cb.cmake_args()
    for off in ("COMMON", "TESTS", "TOOLS", "EXAMPLES", "SERVER", "APP"):
        assert f"-DLLAMA_BUILD_{off}=OFF" in args
    assert "-DLLAMA_BUILD_MTMD=ON" in args and "-DBUILD_SHARED_LIBS=ON" in args
    assert "-DLLAMA_CURL=OFF" in args
    # For this machine's instruction set, said outright (see the next test).
    assert [a for a in args if a.startswith("-DGGML_NATIVE")] == ["-DGGML_NATIVE=ON"]
    assert cb.TARGETS == ("ggml-base", "ggml-cpu", "ggml", "llama", "mtmd")


def test_the_key_changes_with_flags_compiler_and_source(
    cb: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cb.CMAKE_ARGS_ENV, raising=False)
    monkeypatch.delenv("CC", raising=False)
    base = cb.key()
    assert len(base) == 16 and base == cb.key()
    monkeypatch.setenv(cb.CMAKE_ARGS_ENV, "-DGGML_NATIVE=OFF -DGGML_AVX2=ON")
    assert cb.cmake_args()[-2:] == ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON"]
    assert cb.key() != base
    monkeypatch.delenv(cb.CMAKE_ARGS_ENV)
    monkeypatch.setenv("CC", "clang-that-is-not-here")
    assert cb.key() != base
    monkeypatch.delenv("CC")
    facts = cb.key_facts()
    assert facts["sdist_sha256"] == sdist.PINNED_SHA256[sdist.VERSION] and facts["cpu"]
    assert cb.key({**facts, "cpu": "another processor"}) != base


def fake_core(root: Path, cb: ModuleType, *, complete: bool = True) -> Path:
    """A cached core as ``_keep`` leaves it: include/, lib/ (sonames and name links)."""
    (root / "include").mkdir(parents=True)
    (root / "include" / "llama.h").write_text("/* llama */\n")
    (root / "lib").mkdir()
    names = [f"lib{t}{cb.LIB_SUFFIX}.0" for t in cb.TARGETS]
    for n in names[: None if complete else -1]:
        (root / "lib" / n).write_bytes(n.encode())
    (root / "core.json").write_text(json.dumps({"libs": names, "version": sdist.VERSION}))
    return root


def test_a_cached_core_is_used_without_building(
    cb: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    root = fake_core(tmp_path / "cache" / "core" / cb.key(), cb)

    def no_build(*args: object) -> Path:
        raise AssertionError("a complete cached core was built again")

    monkeypatch.setattr(cb, "_build", no_build)
    said: list[str] = []
    assert cb.ensure(said.append) == root
    assert "built before" in said[0]


def test_an_incomplete_cached_core_is_built_again(
    cb: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    fake_core(tmp_path / "cache" / "core" / cb.key(), cb, complete=False)
    built: list[str] = []
    monkeypatch.setattr(cb, "_build", lambda facts, k, *rest: built.append(k) or tmp_path)
    assert cb.ensure(lambda _: None) == tmp_path and built == [cb.key()]


def test_install_copies_the_sonames_and_drops_an_older_core(cb: ModuleType, tmp_path: Path) -> None:
    root = fake_core(tmp_path / "core", cb)
    dest = tmp_path / "pkg" / "_core"
    dest.mkdir(parents=True)
    (dest / "libllama.so.99").write_text("an older core")
    written = cb.install(root, dest)
    names = json.loads((root / "core.json").read_text())["libs"]
    assert sorted(p.name for p in dest.iterdir()) == sorted([*names, "core.json"])
    assert [p.name for p in written] == [*names, "core.json"]
    assert (dest / names[0]).read_bytes() == names[0].encode()


def test_soname_files_follow_cmake_s_links(cb: ModuleType, tmp_path: Path) -> None:
    for t in cb.TARGETS:
        real = tmp_path / f"lib{t}{cb.LIB_SUFFIX}.0.1.2"
        real.write_text(t)
        (tmp_path / f"lib{t}{cb.LIB_SUFFIX}.0").symlink_to(real.name)
        (tmp_path / f"lib{t}{cb.LIB_SUFFIX}").symlink_to(f"lib{t}{cb.LIB_SUFFIX}.0")
    (tmp_path / f"libggml-metal{cb.LIB_SUFFIX}").write_text("a backend libggml links")
    (tmp_path / "libvendor-hash.a").write_text("not shared")
    assert [p.name for p in cb.soname_files(tmp_path)] == [
        f"libggml-base{cb.LIB_SUFFIX}.0",
        f"libggml-cpu{cb.LIB_SUFFIX}.0",
        f"libggml-metal{cb.LIB_SUFFIX}",
        f"libggml{cb.LIB_SUFFIX}.0",
        f"libllama{cb.LIB_SUFFIX}.0",
        f"libmtmd{cb.LIB_SUFFIX}.0",
    ]


def test_the_installed_core_is_beside_the_package_with_its_manifest() -> None:
    """What the install of this environment left: the libraries the manifest names, a
    header hash the native module agrees with (see tests/engine/test_binding.py)."""
    m = core.manifest()
    if not m:
        pytest.skip("this environment's native module predates the built core")
    assert m["version"] == sdist.VERSION and m["package"] == sdist.PACKAGE
    assert m["sdist_sha256"] == sdist.PINNED_SHA256[sdist.VERSION]
    libs = core.libraries()
    assert [p.name for p in libs] == m["libs"] and all(p.is_file() for p in libs)
    stems = [p.name.split(".")[0] for p in libs]
    assert [s for s in stems if s in core.LOAD_ORDER] == list(core.LOAD_ORDER), stems
    base = core.ggml_base()
    assert base is not None and base.name.startswith("libggml-base.")


def test_a_reproducible_build_still_gets_this_machines_instruction_set(
    cb: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Homebrew and Nix set SOURCE_DATE_EPOCH, and ggml's default then turns GGML_NATIVE
    off: llama.cpp configured with our flags and that variable must say it is on."""
    import shutil
    import subprocess

    source = cb.cache_root() / "source" / f"llama.cpp-{cb.sdist().VERSION}"
    cmake = shutil.which("cmake") or str(Path(sys.executable).with_name("cmake"))
    if not (source / "CMakeLists.txt").is_file() or not Path(cmake).exists():
        pytest.skip(f"no llama.cpp source at {source} or no cmake (the core build makes both)")
    monkeypatch.delenv(cb.CMAKE_ARGS_ENV, raising=False)
    flags = cb.cmake_args()
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}

    def native(folder: Path, args: list[str]) -> str:
        done = subprocess.run(
            [cmake, "-S", str(source), "-B", str(folder), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        line = re.search(r"^GGML_NATIVE:BOOL=(\w+)$", (folder / "CMakeCache.txt").read_text(), re.M)
        assert line is not None
        return line[1]

    assert native(tmp_path / "ours", flags) == "ON"
    # ggml's default under that variable, which the flag is there to overrule.
    assert native(tmp_path / "default", [a for a in flags if "GGML_NATIVE" not in a]) == "OFF"
