"""Build the engine's core from the pinned llama.cpp source, once per machine, then cached.

The core is what the native module links and the engine loads: libllama, libmtmd,
libggml, libggml-base and ggml's CPU backend (GPU backends are plugins, built later
by ``localllm backends build``).  setup.py's ``build_ext`` calls ``ensure()`` before it
compiles the shim, then ``install()`` copies the libraries into the package
(``localllm/_core/``, where the shim's rpath points).

``ensure()``:
1. fetches the pinned llama-cpp-python sdist with pip, checked against its sha256
   before anything of it runs, and unpacks its ``vendor/llama.cpp`` into localllm's
   cache (``localllm/backends/sdist.py``: the same pins, download and unpacking as
   ``localllm backends build`` uses, which then finds both already there);
2. configures only what localllm loads: shared libraries, libmtmd through llama.cpp's
   own standalone switch (``LLAMA_BUILD_MTMD``), and none of common, tools, tests,
   examples, server or curl.  llama-cpp-python's build (what localllm used before)
   forces ``LLAMA_BUILD_COMMON`` on, and common alone was a third of its compile time;
3. builds the five targets with ninja and keeps ``include/``, ``lib/`` and ``core.json``
   in ``<cache>/core/<key>/``.

On x86-64 Linux the CPU backend is built as llama.cpp's per-instruction-set variants
(``GGML_BACKEND_DL`` + ``GGML_CPU_ALL_VARIANTS``: x64, sse42, ..., haswell, skylakex,
icelake, zen4, alderlake, sapphirerapids), each a module that ggml scores against the
processor and loads at run time (``ll_backend_init`` in the shim): the core does not
depend on the machine that built it, a wheel built once runs anywhere, and a
reproducible build (``SOURCE_DATE_EPOCH``, which turns ggml's ``GGML_NATIVE`` off) loses
nothing.  Elsewhere (macOS with Metal in the core, arm64 Linux) it is built with
``GGML_NATIVE`` for this machine, set outright for the same reason.

The key is a hash of everything the binaries depend on: the sdist's sha256, the
platform, the compilers, the cmake flags, and for a native build the processor (a
cache folder shared with another machine must not hand such a core over).  A second
install on the same machine (a new venv, pipx, a reinstall) copies the cached core
in seconds.

This runs inside pip's isolated build environment, before localllm's dependencies
are installed: it imports only the standard library (platformdirs when present),
and loads ``sdist.py`` by its path rather than importing the localllm package.
``LOCALLLM_CORE_CMAKE_ARGS`` adds cmake flags, after ours (a core for this machine only,
quicker to build: ``-DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_NATIVE=ON``);
they are part of the key.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import IO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CMAKE_ARGS_ENV = "LOCALLLM_CORE_CMAKE_ARGS"
# What is built.  ninja adds what these link, which on macOS includes the Metal and BLAS
# backends (libggml links every backend it was configured with).
TARGETS = ("ggml-base", "ggml-cpu", "ggml", "llama", "mtmd")
LIB_SUFFIX = ".dylib" if sys.platform == "darwin" else ".so"
# What the first install says it will take (measured on a quiet 2-core machine; README).
VARIANTS_MINUTES = "about 8 minutes on 2 cores"
# Bumped when the layout of a cached core changes: older cache entries are not reused.
LAYOUT = 3


class CoreBuildError(RuntimeError):
    """The core could not be fetched or built; the message says why and where the log is."""


def sdist() -> ModuleType:
    """``localllm/backends/sdist.py``, loaded by path: the localllm package (and its
    dependencies) need not be importable in the build environment."""
    name = "_localllm_build_sdist"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "localllm" / "backends" / "sdist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cache_root() -> Path:
    """localllm's cache folder, by ``localllm/paths.py``'s rule: ``LOCALLLM_CACHE`` when set
    (spaces around it trimmed, as localllm's settings read it), else the platform's."""
    override = os.environ.get("LOCALLLM_CACHE", "").strip()
    if override:
        return Path(override).expanduser()
    try:
        import platformdirs
    except ImportError:  # a --no-build-isolation build without it: its rules, by hand
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Caches" / "localllm"
        if sys.platform == "win32":
            return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "localllm" / "Cache"
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        return (Path(xdg) if xdg else Path.home() / ".cache") / "localllm"
    return Path(platformdirs.user_cache_dir("localllm", appauthor=False))


def cmake_args() -> list[str]:
    """The configure flags of the core: shared libraries, only what localllm loads."""
    rpath = "@loader_path" if sys.platform == "darwin" else "$ORIGIN"
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        # The libraries find each other beside themselves, wherever they are copied.
        f"-DCMAKE_INSTALL_RPATH={rpath}",
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
        "-DLLAMA_BUILD_COMMON=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_TOOLS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        # libmtmd without the tools tree: llama.cpp's switch for library-only builds.
        "-DLLAMA_BUILD_MTMD=ON",
    ]
    if sys.platform == "darwin":
        # As llama-cpp-python sets them: Metal in the core (with its shaders embedded),
        # and on Intel Macs no AVX family (Rosetta and old Macs lack parts of it).
        arch = platform.machine()
        args += [
            f"-DCMAKE_OSX_ARCHITECTURES={arch}",
            "-DGGML_METAL=ON",
            "-DGGML_METAL_EMBED_LIBRARY=ON",
        ]
        if arch == "x86_64":
            args += ["-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF", "-DGGML_F16C=OFF"]
    if variants_default():
        # ggml's CPU backend as llama.cpp's per-instruction-set variants, each a module
        # that ggml scores and loads at run time (``ggml_backend_load_all_from_path``): one
        # build serves every x86-64 machine, so a wheel or a Homebrew bottle built on one
        # machine runs on another at that machine's best, and SOURCE_DATE_EPOCH (which
        # turns GGML_NATIVE off) changes nothing.  Ollama ships its CPU backend this way.
        args += ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DGGML_NATIVE=OFF"]
    elif not (sys.platform == "darwin" and platform.machine() == "x86_64"):
        # Said outright: ggml's default turns GGML_NATIVE off whenever SOURCE_DATE_EPOCH
        # is set (reproducible builds: Homebrew, Nix, Debian), and with no instruction set
        # named either, the CPU backend is built for bare x86-64, without even AVX: several
        # times slower, and nothing says so.
        args.append("-DGGML_NATIVE=ON")
    # LOCALLLM_CORE_CMAKE_ARGS comes last, so a native build for this machine only
    # (-DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_NATIVE=ON) still wins.
    return args + shlex.split(os.environ.get(CMAKE_ARGS_ENV, ""))


def variants_default() -> bool:
    """Whether the core's CPU backend is built as per-ISA variants by default: on x86-64
    Linux, where llama.cpp's variant list is complete and every compiler we support
    knows its flags.  (macOS keeps Metal in the core; arm64 Linux's list needs a compiler
    that knows SME, which Debian 12's gcc does not.)"""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def _flag(args: list[str], name: str) -> str:
    """The value the last ``-D<name>=...`` in ``args`` sets (cmake keeps the last), or ""."""
    value = ""
    for a in args:
        if a.startswith(f"-D{name}="):
            value = a.split("=", 1)[1]
    return value.upper()


def is_variants(args: list[str]) -> bool:
    """Whether these configure flags build the CPU backend as loadable variants."""
    return _flag(args, "GGML_CPU_ALL_VARIANTS") in ("ON", "1", "TRUE", "YES") and _flag(
        args, "GGML_BACKEND_DL"
    ) in ("ON", "1", "TRUE", "YES")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise CoreBuildError(
            f"localllm's build needs {name}; it is a build requirement in "
            "pyproject.toml, so pip installs it unless the build runs "
            "with --no-build-isolation: then install it (pip install "
            f"{name}) or put it on PATH"
        )
    return found


def _first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else ""


def _compiler(env: str, default: str) -> str:
    """What cmake will compile with (``CC``/``CXX`` or ``cc``/``c++``) and its version."""
    words = shlex.split(os.environ.get(env, "")) or [default]
    path = shutil.which(words[-1]) or words[-1]
    return f"{' '.join(words)} ({path}): {_first_line([path, '--version'])}"


def _cpu() -> str:
    """The processor's instruction set, which ``GGML_NATIVE`` compiles for."""
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                # x86 "flags", arm64 "Features": the same for every core.
                if key.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
        except OSError:
            pass
    if sys.platform == "darwin":
        return _first_line(["sysctl", "-n", "machdep.cpu.brand_string"])
    return platform.processor()


def key_facts() -> dict[str, object]:
    """Everything the built core depends on; its hash names the cache folder."""
    s = sdist()
    args = cmake_args()
    facts: dict[str, object] = {
        "layout": LAYOUT,
        "sdist": f"{s.PACKAGE}=={s.VERSION}",
        "sdist_sha256": s.PINNED_SHA256[s.VERSION],
        "platform": f"{sys.platform}-{platform.machine()}",
        "cc": _compiler("CC", "cc"),
        "cxx": _compiler("CXX", "c++"),
        "cmake_args": args,
    }
    if not is_variants(args):
        # A native build is for this processor only: a cache shared with another
        # machine must not hand it over.  The variants serve any x86-64 processor.
        facts["cpu"] = _cpu()
    return facts


def key(facts: dict[str, object] | None = None) -> str:
    text = json.dumps(facts or key_facts(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _load_rank(name: str) -> tuple[int, str]:
    """Dependencies first: ggml-base, the backends (CPU, and Metal and BLAS on macOS),
    ggml, which links them, then llama and mtmd."""
    stem = name.removeprefix("lib").split(".")[0]
    if stem == "ggml-base":
        return 0, stem
    if stem.startswith("ggml-"):
        return 1, stem
    return {"ggml": 2, "llama": 3, "mtmd": 4}.get(stem, 5), stem


def is_cpu_variant(name: str) -> bool:
    """``libggml-cpu-haswell.so``: one of the CPU backend's per-ISA modules."""
    return name.startswith("libggml-cpu-") and name.endswith(LIB_SUFFIX)


def soname_files(folder: Path) -> list[Path]:
    """The shared libraries of a build's ``bin/`` by the name the dynamic linker looks for
    (the soname: ``libllama.so.0``, ``libllama.0.dylib``), in load order."""
    out = []
    plain = [
        p
        for p in folder.iterdir()
        if p.name.startswith("lib")
        and p.name.endswith(LIB_SUFFIX)
        and "." not in p.name[: -len(LIB_SUFFIX)]
    ]
    for p in sorted(plain, key=lambda p: _load_rank(p.name)):
        # cmake's name link points at the soname link, which points at the file.
        out.append(folder / os.readlink(p) if p.is_symlink() else p)
    return out


def _complete(root: Path) -> bool:
    try:
        m = json.loads((root / "core.json").read_text())
        libs = [*m["libs"], *m.get("modules", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return (root / "include" / "llama.h").is_file() and all(
        (root / "lib" / str(n)).is_file() for n in libs
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build of a key at a time (two installs at once: the second waits, then copies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: no lock; the atomic rename below still holds
        yield
        return
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(say: Callable[[str], None] | None = None) -> Path:
    """The built core (``include/``, ``lib/``, ``core.json``): from the cache, else built."""
    say = say or (lambda text: print(f"localllm: {text}", file=sys.stderr, flush=True))
    facts = key_facts()
    k = key(facts)
    cache = cache_root().absolute()
    root = cache / "core" / k
    if _complete(root):
        say(f"using the llama.cpp core built before, from {root}")
        return root
    with _locked(cache / "core" / f".{k}.lock"):
        if _complete(root):  # another install built it while this one waited
            return root
        return _build(facts, k, cache, root, say)


def _build(
    facts: dict[str, object], k: str, cache: Path, root: Path, say: Callable[[str], None]
) -> Path:
    s = sdist()
    started = time.monotonic()
    cmake, ninja = _tool("cmake"), _tool("ninja")
    bdir = cache / "build" / f"core-{k}"
    log_path = cache / "build" / f"core-{k}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    args = facts.get("cmake_args")
    variants = isinstance(args, list) and is_variants([str(a) for a in args])
    what = (
        f"with a CPU backend for each x86-64 instruction set (once: {VARIANTS_MINUTES}"
        if variants
        else "for this machine (once: about 3 minutes on 2 cores"
    )
    say(f"building llama.cpp's core {what}; the log is {log_path})")
    with log_path.open("w") as log:
        log.write(f"# {json.dumps(facts, sort_keys=True)}\n")
        pip_log: list[str] = []
        try:
            tarball = s.fetch(
                s.VERSION,
                cache / "sdist",
                _pip(),
                extra=_download_options(),
                hint=(
                    f"put a copy of the {s.PACKAGE} {s.VERSION} sdist at "
                    f"{cache / 'sdist' / s.filename(s.VERSION)} (it is checked against the "
                    "pinned sha256), or build against your own llama.cpp with "
                    "LOCALLLM_LLAMA_PREFIX (native/README.md)"
                ),
                log=pip_log,
            )
            tree = s.unpack(tarball, cache / "source" / f"llama.cpp-{s.VERSION}")
        except s.SdistError as exc:
            raise CoreBuildError(f"localllm's build: {exc}") from None
        finally:
            log.writelines(pip_log)
        env = dict(os.environ)
        # ggml asks git for its commit, which the unpacked tree cannot answer: the sdist
        # names it, and it is handed over with git switched off (as llama-cpp-python's
        # build reported it: ggml_commit() in the core, what plugin packs are matched on).
        # Git stops at the tree in any case: a cache folder inside some checkout must not
        # stamp that checkout's commit into the core.
        env["GIT_CEILING_DIRECTORIES"] = str(tree.parent)
        commit = s.llama_commit(tarball)
        stamp = [f"-DLLAMA_BUILD_COMMIT={commit[:7]}", "-DGIT_EXE=OFF"] if commit else []
        # cmake from pip's build environment when it ran in it: ninja from the same place.
        _run(
            [
                cmake,
                "-S",
                str(tree),
                "-B",
                str(bdir),
                "-G",
                "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={ninja}",
                *cmake_args(),
                *stamp,
            ],
            log,
            env,
            "configure",
        )
        _run([ninja, "-C", str(bdir), *_targets(ninja, bdir, facts)], log, env, "build")
        seconds = time.monotonic() - started
        log.write(f"# built in {seconds:.1f} s\n")
    _keep(tree, bdir, root, facts, k, seconds, s, commit)
    # The objects go (nothing reads them again); ninja's log of how long each took stays,
    # for a slow install to be explained.
    with contextlib.suppress(OSError):
        shutil.copy2(bdir / ".ninja_log", log_path.with_suffix(".ninja_log"))
    shutil.rmtree(bdir, ignore_errors=True)
    say(f"built llama.cpp's core in {seconds:.0f} s; cached in {root}")
    return root


def _targets(ninja: str, bdir: Path, facts: dict[str, object]) -> list[str]:
    """What ninja builds: the five libraries, where the CPU backend is one each of
    llama.cpp's variants (``ggml-cpu-haswell``, ...: the list is the pinned source's,
    read from the configured build rather than written here a second time)."""
    args = facts.get("cmake_args")
    if not (isinstance(args, list) and is_variants([str(a) for a in args])):
        return list(TARGETS)
    out = subprocess.run(
        [ninja, "-C", str(bdir), "-t", "targets", "all"], capture_output=True, text=True
    )
    variants = sorted(
        {
            line.split(":", 1)[0]
            for line in out.stdout.splitlines()
            if line.startswith("ggml-cpu-") and line.endswith(": phony")
        }
    )
    if not variants:
        raise CoreBuildError(
            f"localllm's build: the configured build in {bdir} lists no CPU variants "
            f"(ninja -t targets: exit {out.returncode})"
        )
    return [t for t in TARGETS if t != "ggml-cpu"] + variants


def _pip() -> list[str]:
    """This Python's pip.  ``-P``: the working folder stays off ``sys.path`` (a ``pip.py``
    lying around must not run), while ``PYTHONPATH`` keeps pip's build environment, which
    has pip (a build requirement) when the base one has none.  It runs in the cache."""
    return [sys.executable, "-P", "-m", "pip"]


def _download_options() -> list[str]:
    """pip reads a sdist's metadata with its build backend, which it installs first in a
    throwaway environment, from sources (``--no-binary :all:`` reaches them too): 40 s on
    a cold cache.  The backend is one of our build requirements, so pip uses it here."""
    if importlib.util.find_spec("scikit_build_core") is not None:
        return ["--no-build-isolation"]
    return []


def _run(argv: list[str], log: IO[str], env: dict[str, str], phase: str) -> None:
    """``argv`` with its output in the log, started in the cache (not where the user
    stands); on failure the error carries the log's last lines, since pip shows only
    the error of a build unless it runs with -v."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    out = subprocess.run(
        argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cache_root().absolute()
    )
    if out.returncode != 0:
        log.flush()
        tail = Path(log.name).read_text(errors="replace").splitlines()[-15:]
        raise CoreBuildError(
            f"localllm's build: the llama.cpp core's {phase} failed "
            f"(exit {out.returncode}); the whole output is in {log.name}:\n" + "\n".join(tail)
        )


def _keep(
    tree: Path,
    bdir: Path,
    root: Path,
    facts: dict[str, object],
    k: str,
    seconds: float,
    s: ModuleType,
    commit: str,
) -> None:
    """``include/``, ``lib/`` and ``core.json`` into ``root``, all at once."""
    tmp = root.with_name(f".tmp-{root.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "include").mkdir(parents=True)
    (tmp / "lib").mkdir()
    headers = [
        *(tree / "include").glob("*.h"),
        *(tree / "ggml" / "include").glob("*.h"),
        tree / "tools" / "mtmd" / "mtmd.h",
        tree / "tools" / "mtmd" / "mtmd-helper.h",
    ]
    for h in headers:
        shutil.copy2(h, tmp / "include" / h.name)
    built = bdir / "bin"
    files = soname_files(built)
    libs = [f for f in files if not is_cpu_variant(f.name)]
    modules = [f for f in files if is_cpu_variant(f.name)]
    for lib in files:
        shutil.copy2(lib, tmp / "lib" / lib.name)  # follows the links: the file itself
        plain = tmp / "lib" / f"{lib.name.split('.')[0]}{LIB_SUFFIX}"
        if plain.name != lib.name:
            plain.symlink_to(lib.name)  # what -lllama finds when the shim is linked
    manifest = {
        "source": f"{s.PACKAGE} sdist",
        "package": s.PACKAGE,
        "version": s.VERSION,
        "sdist_sha256": s.PINNED_SHA256[s.VERSION],
        "ggml_version": s.ggml_version_of(tree),
        "llama_commit": commit,
        "llama_h_sha256": hashlib.sha256((tmp / "include" / "llama.h").read_bytes()).hexdigest(),
        "key": k,
        "facts": facts,
        "libs": [lib.name for lib in libs],
        # Loaded by ggml (the best one for the processor), never linked nor preloaded.
        "modules": [m.name for m in modules],
        "build_seconds": round(seconds, 1),
    }
    (tmp / "core.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(root, ignore_errors=True)  # an incomplete one from an older run
    root.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, root)


def install(root: Path, dest: Path) -> list[Path]:
    """Copy the core's libraries and manifest from ``root`` into ``dest`` (the package's
    ``_core/``), each file through a temporary name: a running process keeps the copy it
    mapped.  Files of an older core are removed.  Returns the files written."""
    manifest = json.loads((root / "core.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    keep = [*manifest["libs"], *manifest.get("modules", []), "core.json"]
    written = []
    for name in keep:
        src = root / ("core.json" if name == "core.json" else f"lib/{name}")
        tmp = dest / f".tmp-{name}-{os.getpid()}"
        shutil.copy2(src, tmp)
        os.replace(tmp, dest / name)
        written.append(dest / name)
    for old in dest.iterdir():
        if old.name not in keep:
            old.unlink()
    return written


if __name__ == "__main__":
    # By hand: build (or find) the core and say where it is.
    print(ensure())
