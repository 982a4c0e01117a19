"""The llama.cpp source that plugins are built from: the pinned llama-cpp-python sdist.

Plugins must come from exactly the source the core was built from, so the
source is the sdist of the installed llama-cpp-python, fetched with pip's own
machinery (its index, proxy and certificate settings) and unpacked once into
the cache.  Nothing from the sdist runs before its hash is checked: pip is
given the sha256 pinned here (``--require-hashes``), and it compares the file
with it before it unpacks anything or runs the package's build code (which
it does to read the sdist's metadata).  A version with no pin here is refused
unless ``--source`` names a file.  ``--source`` takes a local sdist or a
trimmed copy of one (``bench/gpu_check.sh --prepare`` makes such a tarball for
machines without a package index).  Unpacking takes only regular files and
folders under ``vendor/llama.cpp/`` and refuses any member whose name or link
could land outside the destination.  pip runs isolated from the working
folder (``python -I``, started in the cache): a ``pip.py`` where the user
stands must not be what runs.
"""

from __future__ import annotations

import importlib.metadata
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from localllm import paths
from localllm.backends.toolkit import pip_argv
from localllm.errors import LocalLLMError

PACKAGE = "llama-cpp-python"
# sha256 of each sdist we build plugins from; the core is built from the same file.
PINNED_SHA256 = {
    "0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
}
# Parts of vendor/llama.cpp that no build reads: skipping them saves time and disk.
SKIP_TOP = {"models", "docs", "media", ".github"}


class SourceError(LocalLLMError):
    """The source could not be fetched, verified or unpacked."""


def core_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise SourceError(f"{PACKAGE} (the engine's core) is not installed") from None


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file (the store's hasher, without its ``sha256:`` prefix)."""
    from localllm.store.blobs import sha256_file

    return sha256_file(path).removeprefix("sha256:")


def fetch_sdist(version: str, log: list[str] | None = None) -> Path:
    """The sdist in the cache, downloaded with pip when missing, hash-checked either way.

    pip gets the pinned hash (``--require-hashes``) and checks the file before it
    unpacks it or runs any of its build code; a version with no pin is refused.
    """
    want = PINNED_SHA256.get(version)
    if not want:
        raise SourceError(
            f"{PACKAGE} {version} (the installed core) has no pinned sha256 in this localllm "
            f"(it knows {', '.join(sorted(PINNED_SHA256))}), so its source cannot be checked "
            f"before it is used. Install {PACKAGE}=={next(reversed(PINNED_SHA256))}, or get the "
            f"{version} sdist yourself, check it, and pass it with --source FILE.")
    # Absolute: pip runs in this folder, so a relative path in its argv would miss.
    folder = paths.cache().absolute() / "sdist"
    target = folder / f"{PACKAGE.replace('-', '_')}-{version}.tar.gz"
    if not target.exists():
        _download(version, want, folder, target, log)
    have = sha256_of(target)
    if have != want:
        target.unlink(missing_ok=True)
        raise SourceError(f"the {PACKAGE} {version} sdist has sha256 {have}, expected {want}; "
                          "the corrupt download was removed, try again")
    return target


def _download(version: str, want: str, folder: Path, target: Path,
              log: list[str] | None) -> None:
    """``pip download`` of the pinned sdist into ``target``; pip refuses another file."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        # A hash in a requirements file puts pip in --require-hashes mode for it: the file
        # is compared with the pin right after the download, before pip unpacks it to read
        # its metadata (which runs the sdist's build backend).
        req = tmp / "pinned.txt"
        req.write_text(f"{PACKAGE}=={version} --hash=sha256:{want}\n")
        argv = pip_argv("download", "--no-deps", "--no-binary", ":all:", "--require-hashes",
                        "-r", str(req), "-d", str(tmp / "dl"))
        out = subprocess.run(argv, capture_output=True, text=True, cwd=folder)
        if log is not None:
            log.append(f"$ {' '.join(argv)}\n{out.stdout}{out.stderr}")
        got = list((tmp / "dl").glob("*.tar.gz"))
        text = out.stderr or out.stdout
        if "DO NOT MATCH THE HASHES" in text:
            raise SourceError(
                f"the {PACKAGE} {version} sdist the package index served does not have the "
                f"pinned sha256 {want}; pip refused it before running any of it. Check the "
                "index (pip config list), or pass --source with a copy of the sdist.")
        if out.returncode != 0 or len(got) != 1:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise SourceError(f"could not download the {PACKAGE} {version} source with pip: "
                              f"{tail or 'no file'}. Without a package index, pass --source "
                              "with a copy of the sdist.")
        os.replace(got[0], target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refuse(name: str, why: str) -> SourceError:
    return SourceError(f"refusing an unsafe path in the source tarball: {name!r} ({why})")


def _check_member(m: tarfile.TarInfo) -> list[str]:
    """The parts of ``m``'s name, or ``SourceError`` when it or its link could escape."""
    parts = m.name.split("/")
    if parts[:1] == ["."]:
        # "./" and "./pkg/...", as `tar -C dir .` writes them: the archive's own root.
        if len(parts) == 1 and m.isdir():
            return []
        parts = parts[1:]
    if m.name.startswith("/") or "\\" in m.name or ":" in parts[0]:
        raise _refuse(m.name, "absolute")
    if any(p in ("", ".", "..") for p in parts):
        # An empty part ("a//b") turns the rest into an absolute path when joined.
        raise _refuse(m.name, "empty, '.' or '..' part")
    if m.issym() or m.islnk():
        # Links are never extracted (a build reads none), but one that leaves the tree
        # has no business in a source tarball.
        base = posixpath.dirname("/".join(parts)) if m.issym() else ""
        to = posixpath.normpath(posixpath.join(base, m.linkname))
        if m.linkname.startswith("/") or to == ".." or to.startswith("../"):
            raise _refuse(m.name, f"link to {m.linkname!r} outside the tree")
    elif not (m.isfile() or m.isdir()):
        raise _refuse(m.name, "a device, fifo or other special file")
    return parts


def _members(tar: tarfile.TarFile) -> list[tuple[tarfile.TarInfo, str]]:
    """(member, path below vendor/llama.cpp/) for what a build reads; unsafe names refused."""
    out = []
    for m in tar.getmembers():
        parts = _check_member(m)
        try:
            i = next(k for k in range(len(parts) - 1)
                     if parts[k] == "vendor" and parts[k + 1] == "llama.cpp")
        except StopIteration:
            continue
        rel = parts[i + 2:]
        if not rel or rel[0] in SKIP_TOP or not (m.isfile() or m.isdir()):
            continue
        out.append((m, "/".join(rel)))
    return out


def _target(tmp: Path, m: tarfile.TarInfo, rel: str) -> Path:
    """Where ``rel`` lands below ``tmp``, checked twice: by tarfile's ``data`` filter where
    this Python has it (3.11.4+), and by resolving the path ourselves (older 3.11 too)."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is not None:
        try:
            data_filter(m.replace(name=rel, deep=False), str(tmp))
        except tarfile.FilterError as exc:
            raise _refuse(m.name, str(exc)) from None
    target = (tmp / rel).resolve()
    if not target.is_relative_to(tmp.resolve()):
        raise _refuse(m.name, "outside the destination")
    return target


def unpack(tarball: Path, dest: Path) -> Path:
    """``vendor/llama.cpp`` of ``tarball`` into ``dest`` (atomically: all or nothing)."""
    if (dest / "CMakeLists.txt").exists() and (dest / ".complete").exists():
        return dest
    tmp = dest.with_name(f".tmp-{dest.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with tarfile.open(tarball, "r:*") as tar:
            members = _members(tar)
            if not members:
                raise SourceError(f"{tarball} holds no vendor/llama.cpp/ folder; pass the "
                                  f"{PACKAGE} sdist or a trimmed copy of it")
            tmp.mkdir(parents=True)
            for m, rel in members:
                target = _target(tmp, m, rel)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                if src is None:
                    continue
                with src, target.open("wb") as f:
                    shutil.copyfileobj(src, f)
                if m.mode & 0o111:
                    target.chmod(0o755)
        (tmp / ".complete").write_text(str(tarball))
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    except (OSError, tarfile.TarError) as exc:
        raise SourceError(f"could not unpack {tarball}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def ggml_version_of(tree: Path) -> str:
    """GGML_VERSION_MAJOR.MINOR.PATCH from ggml/CMakeLists.txt."""
    text = (tree / "ggml" / "CMakeLists.txt").read_text(errors="replace")
    parts = [re.search(rf"set\(GGML_VERSION_{k}\s+(\d+)\)", text) for k in
             ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise SourceError(f"{tree} has no GGML_VERSION in ggml/CMakeLists.txt")
    return ".".join(p.group(1) for p in parts if p)


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
