"""The llama.cpp source that plugins are built from: the one the core was built from.

Plugins must come from exactly the source the core was built from: the pinned
llama-cpp-python sdist named in the core's manifest (``backends/core.py``, written
by the install: ``native/core_build.py``).  The pins, the download and
the unpacking live in ``sdist.py``, shared with the install; this module adds the
cache folders, localllm's errors and the ``--source`` way out.  The sdist is fetched
with pip's own machinery (its index, proxy and certificate settings) and checked
against the pinned sha256 before anything of it runs; the install leaves it in the
cache, so a plugin build usually finds it there.  A version with no pin here is
refused unless ``--source`` names a file.  ``--source`` takes a local sdist or a
trimmed copy of one (``bench/gpu_check.sh --prepare`` makes such a tarball for
machines without a package index).  pip runs isolated from the working folder
(``python -I``, started in the cache): a ``pip.py`` where the user stands must not be
what runs.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from localllm import paths
from localllm.backends import core, sdist
from localllm.backends.isolated import pip_argv
from localllm.errors import LocalLLMError

PACKAGE = sdist.PACKAGE
# The same dict as sdist's (tests add pins to it).
PINNED_SHA256 = sdist.PINNED_SHA256
SKIP_TOP = sdist.SKIP_TOP


class SourceError(LocalLLMError):
    """The source could not be fetched, verified or unpacked."""


def core_version() -> str:
    """The llama-cpp-python version whose sdist the core was built from (the pinned one
    when the core has no manifest: a prefix build must match the same llama.h)."""
    return str(core.manifest().get("version") or sdist.VERSION)


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    return sdist.sha256_file(path)


def fetch_sdist(version: str, log: list[str] | None = None) -> Path:
    """The sdist in the cache, downloaded with pip when missing, hash-checked either way.

    pip gets the pinned hash (``--require-hashes``) and checks the file before it
    unpacks it or runs any of its build code; a version with no pin is refused.
    """
    if not PINNED_SHA256.get(version):
        raise SourceError(
            f"{PACKAGE} {version} (the core's source) has no pinned sha256 in this localllm "
            f"(it knows {', '.join(sorted(PINNED_SHA256))}), so its source cannot be checked "
            f"before it is used. Reinstall localllm (its core is built from "
            f"{PACKAGE}=={next(reversed(PINNED_SHA256))}), or get the {version} sdist "
            "yourself, check it, and pass it with --source FILE."
        )
    try:
        return sdist.fetch(
            version,
            paths.cache() / "sdist",
            pip_argv(),
            hint="pass --source with a copy of the sdist",
            log=log,
        )
    except sdist.SdistError as exc:
        raise SourceError(str(exc)) from None


def _check_member(m: tarfile.TarInfo) -> list[str]:
    """The parts of ``m``'s name, or ``SourceError`` when it or its link could escape
    (pack installs check their members the same way)."""
    try:
        return sdist._check_member(m)
    except sdist.SdistError as exc:
        raise SourceError(str(exc)) from None


def unpack(tarball: Path, dest: Path) -> Path:
    """``vendor/llama.cpp`` of ``tarball`` into ``dest`` (atomically: all or nothing)."""
    try:
        return sdist.unpack(tarball, dest)
    except sdist.SdistError as exc:
        raise SourceError(str(exc)) from None


def ggml_version_of(tree: Path) -> str:
    """GGML_VERSION_MAJOR.MINOR.PATCH from ggml/CMakeLists.txt."""
    try:
        return sdist.ggml_version_of(tree)
    except sdist.SdistError as exc:
        raise SourceError(str(exc)) from None


def ensure(source: Path | None = None, log: list[str] | None = None) -> Path:
    """The unpacked llama.cpp tree to build from (``source``: a local tarball instead)."""
    if source is not None:
        source = source.expanduser().resolve()
        if not source.is_file():
            raise SourceError(f"--source {source}: no such file")
        key = sha256_of(source)[:16]
        return unpack(source, paths.cache() / "source" / f"local-{key}")
    version = core_version()
    return unpack(fetch_sdist(version, log), paths.cache() / "source" / f"llama.cpp-{version}")
