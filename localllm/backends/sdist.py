"""The pinned llama.cpp source: which sdist, its sha256, and how it is fetched and unpacked.

Two users, one copy of the logic: the install (``native/core_build.py`` compiles the
engine's core from this source inside pip's build environment) and ``localllm
backends build`` (plugins must come from exactly the source the core came from, see
``backends/source.py``).  The install loads this file by its path, before localllm or
any of its dependencies is installed, so it imports nothing but the standard library
and raises only ``SdistError``; ``source.py`` turns that into localllm's error tree.

The source is llama-cpp-python's sdist (its ``vendor/llama.cpp``), fetched with pip so
that the user's index, proxy and certificate settings apply.  pip is given the pinned
sha256 (``--require-hashes``) and compares the file with it before it unpacks it or
runs any of the package's build code (which it does to read the sdist's metadata).
Unpacking takes only regular files and folders under ``vendor/llama.cpp/`` and
refuses any member whose name or link could land outside the destination.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

PACKAGE = "llama-cpp-python"
# The source of the core that this localllm builds at install time.
VERSION = "0.3.36"
# sha256 of each sdist we build from; the core and every plugin come from the same file.
PINNED_SHA256 = {
    "0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
}
# Parts of vendor/llama.cpp that no build reads: skipping them saves time and disk.
SKIP_TOP = {"models", "docs", "media", ".github"}


class SdistError(Exception):
    """The source could not be fetched, verified or unpacked."""


def filename(version: str) -> str:
    """The sdist's file name, as the package index serves it."""
    return f"{PACKAGE.replace('-', '_')}-{version}.tar.gz"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(
    version: str,
    folder: Path,
    pip: Sequence[str],
    *,
    extra: Sequence[str] = (),
    hint: str = "",
    log: list[str] | None = None,
) -> Path:
    """The sdist of ``version`` in ``folder``, downloaded with ``pip`` (an argv prefix that
    runs pip) when missing, hash-checked either way.  ``extra``: more ``pip download``
    options; ``hint``: what the user can do instead, appended to download errors.

    A file already in ``folder`` is checked too, and removed when it does not match: a
    second run then downloads it again.  A version with no pin is refused.
    """
    want = PINNED_SHA256.get(version)
    if not want:
        raise SdistError(f"{PACKAGE} {version} has no pinned sha256 in this localllm")
    # Absolute: pip runs in this folder, so a relative path in its argv would miss.
    folder = folder.absolute()
    target = folder / filename(version)
    if not target.exists():
        _download(version, want, folder, target, pip, extra, hint, log)
    have = sha256_file(target)
    if have != want:
        target.unlink(missing_ok=True)
        raise SdistError(
            f"the {PACKAGE} {version} sdist has sha256 {have}, expected {want}; "
            "the corrupt download was removed, try again"
        )
    return target


def _download(
    version: str,
    want: str,
    folder: Path,
    target: Path,
    pip: Sequence[str],
    extra: Sequence[str],
    hint: str,
    log: list[str] | None,
) -> None:
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
        argv = [
            *pip,
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--require-hashes",
            *extra,
            "-r",
            str(req),
            "-d",
            str(tmp / "dl"),
        ]
        # In our folder, never where the user stands: see the callers' ``pip`` argv.
        out = subprocess.run(argv, capture_output=True, text=True, cwd=folder)
        if log is not None:
            log.append(f"$ {' '.join(argv)}\n{out.stdout}{out.stderr}")
        got = list((tmp / "dl").glob("*.tar.gz"))
        text = out.stderr or out.stdout
        if "DO NOT MATCH THE HASHES" in text:
            raise SdistError(
                f"the {PACKAGE} {version} sdist the package index served does not have the "
                f"pinned sha256 {want}; pip refused it before running any of it. Check the "
                f"index (pip config list){', or ' + hint if hint else ''}."
            )
        if out.returncode != 0 or len(got) != 1:
            tail = " | ".join(text.strip().splitlines()[-3:])
            instead = f" Without a package index, {hint}." if hint else ""
            raise SdistError(
                f"could not download the {PACKAGE} {version} source with pip: "
                f"{tail or 'no file'}.{instead}"
            )
        os.replace(got[0], target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refuse(name: str, why: str) -> SdistError:
    return SdistError(f"refusing an unsafe path in the source tarball: {name!r} ({why})")


def _check_member(m: tarfile.TarInfo) -> list[str]:
    """The parts of ``m``'s name, or ``SdistError`` when it or its link could escape."""
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
            i = next(
                k
                for k in range(len(parts) - 1)
                if parts[k] == "vendor" and parts[k + 1] == "llama.cpp"
            )
        except StopIteration:
            continue
        rel = parts[i + 2 :]
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
                raise SdistError(
                    f"{tarball} holds no vendor/llama.cpp/ folder; pass the "
                    f"{PACKAGE} sdist or a trimmed copy of it"
                )
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
        # Another process (a second install, a plugin build) may have finished the same
        # tree meanwhile and be building from it: theirs stays, ours goes.
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)  # a half one, from an older run
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
    except (OSError, tarfile.TarError) as exc:
        raise SdistError(f"could not unpack {tarball}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def llama_commit(tarball: Path) -> str:
    """The llama.cpp commit the sdist vendors ("" when it does not say).

    llama-cpp-python's sdist carries its git folder, where the submodule's HEAD names the
    commit (its ``vendor/llama.cpp/.git`` only points there, and unpacking takes
    nothing outside vendor/llama.cpp, so git finds no commit in the unpacked tree); a
    trimmed copy (``bench/gpu_check.sh --prepare``) keeps a minimal repository in
    ``vendor/llama.cpp/.git``.
    """
    ends = ("/.git/modules/vendor/llama.cpp/HEAD", "/vendor/llama.cpp/.git/HEAD")
    try:
        with tarfile.open(tarball, "r:*") as tar:
            for m in tar:
                if m.isfile() and m.name.endswith(ends):
                    f = tar.extractfile(m)
                    text = f.read(64).decode("ascii", "replace").strip() if f else ""
                    return text if re.fullmatch(r"[0-9a-f]{40}", text) else ""
    except (OSError, tarfile.TarError):
        pass
    return ""


def ggml_version_of(tree: Path) -> str:
    """GGML_VERSION_MAJOR.MINOR.PATCH from ggml/CMakeLists.txt."""
    text = (tree / "ggml" / "CMakeLists.txt").read_text(errors="replace")
    parts = [
        re.search(rf"set\(GGML_VERSION_{k}\s+(\d+)\)", text) for k in ("MAJOR", "MINOR", "PATCH")
    ]
    if not all(parts):
        raise SdistError(f"{tree} has no GGML_VERSION in ggml/CMakeLists.txt")
    return ".".join(p.group(1) for p in parts if p)
