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
    native = [a for a in args if a.startswith("-DGGML_NATIVE")]
    if cb.variants_default():
        # Every CPU variant, loaded at run time: the core serves any x86-64 processor.
        assert "-DGGML_BACKEND_DL=ON" in args and "-DGGML_CPU_ALL_VARIANTS=ON" in args
        assert native == ["-DGGML_NATIVE=OFF"] and cb.is_variants(args)
    else:
        # For this machine's instruction set, said outright (see the reproducible build).
        assert native == ["-DGGML_NATIVE=ON"] and not cb.is_variants(args)
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
    assert facts["sdist_sha256"] == sdist.PINNED_SHA256[sdist.VERSION]
    # The processor is part of a native core's key only: the variants serve any.
    assert ("cpu" in facts) == (not cb.variants_default())
    native = "-DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_NATIVE=ON"
    monkeypatch.setenv(cb.CMAKE_ARGS_ENV, native)
    assert not cb.is_variants(cb.cmake_args()) and cb.key_facts()["cpu"]
    assert cb.key({**facts, "cpu": "another processor"}) != base


def fake_core(root: Path, cb: ModuleType, *, complete: bool = True) -> Path:
    """A cached core as ``_keep`` leaves it: include/, lib/ (sonames and name links)."""
    (root / "include").mkdir(parents=True)
    (root / "include" / "llama.h").write_text("/* llama */\n")
    (root / "lib").mkdir()
    names = [f"lib{t}{cb.LIB_SUFFIX}.0" for t in cb.TARGETS if t != "ggml-cpu"]
    modules = [f"libggml-cpu-{v}{cb.LIB_SUFFIX}" for v in ("x64", "haswell", "zen4")]
    for n in [*names, *modules][: None if complete else -1]:  # incomplete: a module missing
        (root / "lib" / n).write_bytes(n.encode())
    manifest = {"libs": names, "modules": modules, "version": sdist.VERSION}
    (root / "core.json").write_text(json.dumps(manifest))
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
    m = json.loads((root / "core.json").read_text())
    names = [*m["libs"], *m["modules"]]
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
    (tmp_path / f"libggml-cpu-zen4{cb.LIB_SUFFIX}").write_text("a CPU variant ggml loads")
    (tmp_path / "libvendor-hash.a").write_text("not shared")
    assert [p.name for p in cb.soname_files(tmp_path)] == [
        f"libggml-base{cb.LIB_SUFFIX}.0",
        f"libggml-cpu{cb.LIB_SUFFIX}.0",
        f"libggml-cpu-zen4{cb.LIB_SUFFIX}",
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
    variants = core.cpu_variants()
    assert [p.name for p in variants] == m.get("modules", [])
    # The CPU backend is either linked (a native build) or a set of modules ggml loads.
    order = [s for s in core.LOAD_ORDER if not (variants and s == "libggml-cpu")]
    assert [s for s in stems if s in core.LOAD_ORDER] == order, stems
    base = core.ggml_base()
    assert base is not None and base.name.startswith("libggml-base.")


def test_a_reproducible_build_still_gets_this_machines_instruction_set(
    cb: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Homebrew and Nix set SOURCE_DATE_EPOCH, and ggml's default then turns GGML_NATIVE
    off: llama.cpp configured with our flags and that variable must still build code for
    this machine's vector units (every CPU variant, on x86-64 Linux; else GGML_NATIVE)."""
    import shutil
    import subprocess

    source = cb.cache_root() / "source" / f"llama.cpp-{cb.sdist().VERSION}"
    cmake = shutil.which("cmake") or str(Path(sys.executable).with_name("cmake"))
    ninja = shutil.which("ninja") or str(Path(sys.executable).with_name("ninja"))
    if not (source / "CMakeLists.txt").is_file() or not Path(cmake).exists():
        pytest.skip(f"no llama.cpp source at {source} or no cmake (the core build makes both)")
    if not Path(ninja).exists():
        pytest.skip("no ninja (the core build installs it)")
    monkeypatch.delenv(cb.CMAKE_ARGS_ENV, raising=False)
    flags = cb.cmake_args()
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}

    def configure(folder: Path, args: list[str]) -> tuple[str, str]:
        done = subprocess.run(
            [
                cmake,
                "-S",
                str(source),
                "-B",
                str(folder),
                "-G",
                "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={ninja}",
                *args,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        line = re.search(r"^GGML_NATIVE:BOOL=(\w+)$", (folder / "CMakeCache.txt").read_text(), re.M)
        assert line is not None
        return line[1], (folder / "build.ninja").read_text()

    native, ninja_file = configure(tmp_path / "ours", flags)
    if cb.variants_default():
        targets = set(re.findall(r"^build (ggml-cpu-[\w.]+): phony", ninja_file, re.M))
        # The variants a machine with AVX2, AVX-512 or AMX runs: all built, whatever
        # SOURCE_DATE_EPOCH says, and the plain x86-64 one for the oldest processors.
        assert {
            "ggml-cpu-x64",
            "ggml-cpu-haswell",
            "ggml-cpu-skylakex",
            "ggml-cpu-zen4",
            "ggml-cpu-sapphirerapids",
        } <= targets, sorted(targets)
        assert native == "OFF"
    else:
        assert native == "ON"
        # ggml's default under that variable, which the flag is there to overrule.
        default, _ = configure(tmp_path / "default", [a for a in flags if "GGML_NATIVE" not in a])
        assert default == "OFF"


def test_the_loaded_core_uses_this_machines_vector_units() -> None:
    """The CPU backend the engine loaded (the best-scoring variant, on a variant build) has
    the instruction sets this processor reports: a core that lost them is several times
    slower and says nothing."""
    from localllm.engine import binding

    flags = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if not flags:
        pytest.skip("no /proc/cpuinfo flags to compare with")
    info = binding.system_info()
    expected = {"avx": "AVX = 1", "avx2": "AVX2 = 1", "fma": "FMA = 1", "avx512f": "AVX512 = 1"}
    for flag, text in expected.items():
        if flag in flags:
            assert text in info, (flag, info)


def test_ggml_loads_the_best_variant_this_processor_runs(tmp_path: Path) -> None:
    """Without the AVX-512 variants (a machine that lacks AVX-512 sees the same thing:
    they score 0), ggml loads the AVX2 one: the choice is made at load, by the processor."""
    import shutil
    import subprocess

    variants = core.cpu_variants()
    if not any(p.name == "libggml-cpu-haswell.so" for p in variants):
        pytest.skip("this core has its CPU backend linked, not as variants")
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if " avx2" not in flags:
        pytest.skip("this processor has no AVX2")
    lib = tmp_path / "prefix" / "lib"
    lib.mkdir(parents=True)
    keep = ("x64", "sse42", "sandybridge", "haswell")
    for p in [*core.libraries(), *variants]:
        if p in variants and p.name.removeprefix("libggml-cpu-").removesuffix(".so") not in keep:
            continue
        shutil.copy2(p, lib / p.name)
        plain = lib / f"{p.name.split('.')[0]}{core.SUFFIX}"
        if not plain.exists():
            plain.symlink_to(p.name)  # a prefix's libraries go by their plain names
    code = "from localllm.engine import binding; print(binding.system_info())"
    env = {**os.environ, "LOCALLLM_LLAMA_PREFIX": str(lib.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "AVX2 = 1" in out.stdout and "AVX512 = 1" not in out.stdout, out.stdout
