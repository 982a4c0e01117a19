"""``localllm backends build NAME``: compile one ggml plugin and install it, all or nothing.

Steps: check the toolkit (before anything compiles), get the pinned source,
make sure its ggml version is the core's (a plugin for another version would
be refused at load), configure a cached build tree with ``GGML_BACKEND_DL=ON``
and the CPU backend off (the core has its own), build the plugin's target with
ninja while reporting ``[n/m]`` progress, copy the library into
``<backends>/<ggml version>/`` under a temporary name and rename it into place.
An error or Ctrl-C leaves the previous plugin (or none), never half of one.
Every line of cmake and ninja output goes to a log file.  The tools run in the
cache folder, not where the user stands, and the plugin and its folders are
installed 0755 whatever the umask: a plugin others could write is refused at
load (``trust``).

CUDA without a toolkit: the package-index set ``toolkit.check_cuda`` chose is
described (what, how big, where) and installed only when ``confirm`` accepts
it; the plugin is linked with runpath ``$ORIGIN/cuda-libs`` and the CUDA
runtime and cuBLAS are put in that folder before the plugin is renamed into
place (``cuda.wheels.install_runtime``).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from localllm.backends import catalog, source, toolkit, trust
from localllm.backends.cuda import wheels as cuda_wheels
from localllm.backends.isolated import stream
from localllm.backends.layout import build_dir_for, build_log_path, libs_folder, plugin_path
from localllm.errors import LocalLLMError

__all__ = ["BuildFailed", "BuildResult", "build", "build_dir_for", "build_log_path"]

Progress = Callable[[str, int, int], None]  # (phase, done, total)
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


class BuildFailed(LocalLLMError):
    """cmake or ninja failed; the message names the log."""


@dataclass(frozen=True)
class BuildResult:
    backend: str
    path: Path  # the installed plugin
    ggml_version: str
    seconds: float
    size: int
    build_dir: Path
    log: Path
    runtime: Path | None = None  # the libraries put beside the plugin (cuda-libs/), if any


def base_flags(backend: catalog.Backend, with_tools: bool) -> list[str]:
    """cmake flags of a plugin build: DL backends, no native CPU code, nothing but ggml."""
    return [
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_BACKEND_DL=ON",
        "-DGGML_NATIVE=OFF",
        "-DBUILD_SHARED_LIBS=ON",
        f"-D{backend.cmake_flag}=ON",
        # The core's CPU backend serves the engine; one here would only be needed by
        # tools built in the same tree (llama-bench for gpu_check).
        f"-DGGML_CPU={'ON' if with_tools else 'OFF'}",
        f"-DLLAMA_BUILD_TOOLS={'ON' if with_tools else 'OFF'}",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_OPENSSL=OFF",
    ]


def _stream(
    argv: list[str], log: IO[str], env: dict[str, str], phase: str, progress: Progress | None
) -> None:
    if progress:
        progress(phase, 0, 0)

    def on_line(line: str) -> None:
        m = _STEP.match(line)
        if m and progress:
            progress(phase, int(m.group(1)), int(m.group(2)))

    rc, tail = stream(argv, log, on_line, env=env, keep=12)
    if rc != 0:
        errors = [ln for ln in tail if "error" in ln.lower()] or tail[-4:]
        raise BuildFailed(
            f"{phase} failed (exit {rc}): {' | '.join(errors)[-600:]}; "
            f"the whole output is in {log.name}"
        )


def install_atomically(built: Path, dest: Path) -> None:
    """Copy ``built`` to ``dest`` through a temporary name in the same folder, 0755."""
    trust.make_dirs(dest.parent)
    tmp = dest.with_name(f".tmp-{dest.name}-{os.getpid()}")
    try:
        shutil.copy2(built, tmp)
        tmp.chmod(0o755)  # copy2 keeps the linker's mode, group-writable under umask 002
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _accept_wheels(
    kit: toolkit.Toolkit, tell: Callable[[str], None], confirm: Callable[[str], bool] | None
) -> None:
    """Say what the package-index toolkit costs; ``ToolkitMissing`` unless it is accepted
    (or already installed)."""
    if kit.wheels is None:
        return
    ws, why = kit.wheels
    root = cuda_wheels.installed(ws)
    if root is not None:
        tell(f"using NVIDIA's CUDA {ws.cuda} compiler from the package index, installed in {root}")
        return
    cuda_wheels.check_space(ws)
    text = cuda_wheels.plan_text(ws, why)
    tell(text)
    if confirm is None or not confirm(text):
        raise toolkit.ToolkitMissing(
            "nothing was downloaded: run the build again with --yes "
            "to accept the download, or install the CUDA toolkit and "
            "put its nvcc on PATH"
        )


def build(
    name: str,
    *,
    arch: str | None = None,
    jobs: int = 0,
    source_file: Path | None = None,
    also: tuple[str, ...] = (),
    core_ggml: str = "",
    cuda: str | None = None,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
    confirm: Callable[[str], bool] | None = None,
) -> BuildResult:
    """Build and install plugin ``name``; ``core_ggml`` is the core's ggml version if known;
    ``notice`` hears what the build does beyond compiling (installing cmake and ninja, the
    CUDA toolkit); ``confirm`` is asked before a download of the CUDA toolkit (None: no);
    ``cuda``: the CUDA version asked for (``--cuda``)."""
    backend = catalog.get(name)
    notices: list[str] = []

    def tell(text: str) -> None:
        notices.append(text)
        if notice:
            notice(text)

    kit = toolkit.check(backend, arch, notice=tell, cuda=cuda)
    _accept_wheels(kit, tell, confirm)
    started = time.monotonic()
    log_path = build_log_path(backend.name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        for note in [*notices, *kit.notes]:
            log.write(f"# {note}\n")
        wheels_root = _toolkit_from_wheels(kit, backend, log, progress)
        tree, version = _source(source_file, core_ggml, log, progress)
        bdir = build_dir_for(backend.name + ("-tools" if also else ""), version).absolute()
        built = _compile(kit, backend, tree, bdir, also, jobs, log, progress)
        dest = plugin_path(version, backend.filename)
        runtime = _put_in_place(built, dest, backend, wheels_root)
        seconds = time.monotonic() - started
        log.write(f"# installed {dest} ({dest.stat().st_size} bytes) in {seconds:.1f} s\n")
    return BuildResult(
        backend.name, dest, version, seconds, dest.stat().st_size, bdir, log_path, runtime
    )


def _toolkit_from_wheels(
    kit: toolkit.Toolkit, backend: catalog.Backend, log: IO[str], progress: Progress | None
) -> Path | None:
    """The package-index CUDA tree, installed when the toolkit check chose it; its cmake
    arguments join the kit's."""
    if kit.wheels is None:
        return None
    root = cuda_wheels.install(kit.wheels[0], toolkit.compiler(), log, progress)
    args, env = cuda_wheels.cmake_args(root, libs_folder(backend.name))
    kit.cmake_args += args
    kit.env.update(env)
    return root


def _source(
    source_file: Path | None, core_ggml: str, log: IO[str], progress: Progress | None
) -> tuple[Path, str]:
    """(the unpacked llama.cpp tree, its ggml version), refused unless it is the core's."""
    if progress:
        progress("source", 0, 1)
    pip_log: list[str] = []
    try:
        # Absolute: cmake and ninja run in the cache folder, not where the user stands.
        tree = source.ensure(source_file, pip_log).absolute()
    finally:
        log.writelines(pip_log)
    version = source.ggml_version_of(tree)
    if core_ggml and version != core_ggml:
        raise BuildFailed(
            f"the source is ggml {version} but the installed core is ggml "
            f"{core_ggml}: the plugin would be refused; use the "
            f"{source.PACKAGE} {source.core_version()} source"
        )
    return tree, version


def _compile(
    kit: toolkit.Toolkit,
    backend: catalog.Backend,
    tree: Path,
    bdir: Path,
    also: tuple[str, ...],
    jobs: int,
    log: IO[str],
    progress: Progress | None,
) -> Path:
    """Configure ``bdir`` from ``tree`` and build the plugin (and ``also``): the built file."""
    env = {**os.environ, **kit.env}
    configure = [
        kit.cmake,
        "-S",
        str(tree),
        "-B",
        str(bdir),
        f"-DCMAKE_MAKE_PROGRAM={kit.ninja}",
        *base_flags(backend, bool(also)),
        *kit.cmake_args,
    ]
    _stream(configure, log, env, "configure", progress)
    jobs_arg = ["-j", str(jobs)] if jobs > 0 else []
    targets = [backend.target, *also]
    _stream([kit.ninja, "-C", str(bdir), *jobs_arg, *targets], log, env, "build", progress)
    built = next(
        (p for p in (bdir / "bin" / backend.filename, bdir / backend.filename) if p.exists()),
        None,
    )
    if built is None:
        raise BuildFailed(f"the build finished but {backend.filename} is not in {bdir}/bin")
    return built


def _put_in_place(
    built: Path, dest: Path, backend: catalog.Backend, wheels_root: Path | None
) -> Path | None:
    """The plugin at ``dest``, after the runtime libraries it looks for from its first
    load (a package-index build's); the folder of those libraries, if any."""
    runtime = None
    if wheels_root is not None:
        runtime = cuda_wheels.install_runtime(wheels_root, dest.parent, libs_folder(backend.name))
    install_atomically(built, dest)
    if runtime is None:  # libraries an earlier build or pack put there: this one does not
        shutil.rmtree(dest.parent / libs_folder(backend.name), ignore_errors=True)
    return runtime
