"""The llama.cpp source that plugins are built from: the pinned llama-cpp-python sdist.

Plugins must come from exactly the source the core was built from, so the
source is the sdist of the installed llama-cpp-python, fetched with pip's own
machinery (its index, proxy and certificate settings), checked against the
sha256 pinned here, and unpacked once into the cache.  ``--source`` takes a
local sdist or a trimmed copy of one (``bench/gpu_check.sh --prepare`` makes
such a tarball for machines without a package index).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from localllm import paths
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
    """The sdist in the cache, downloaded with pip when missing, hash-checked either way."""
    folder = paths.cache() / "sdist"
    name = f"{PACKAGE.replace('-', '_')}-{version}.tar.gz"
    target = folder / name
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"{PACKAGE}=={version}", "-d", str(tmp)]
        out = subprocess.run(argv, capture_output=True, text=True)
        if log is not None:
            log.append(out.stdout + out.stderr)
        got = list(tmp.glob("*.tar.gz"))
        if out.returncode != 0 or not got:
            shutil.rmtree(tmp, ignore_errors=True)
            tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
            raise SourceError(f"could not download the {PACKAGE} {version} source with pip: "
                              f"{tail or 'no file'}. Without a package index, pass --source "
                              "with a copy of the sdist.")
        os.replace(got[0], target)
        shutil.rmtree(tmp, ignore_errors=True)
    want = PINNED_SHA256.get(version)
    have = sha256_of(target)
    if want and have != want:
        target.unlink(missing_ok=True)
        raise SourceError(f"the {PACKAGE} {version} sdist has sha256 {have}, expected {want}; "
                          "the corrupt download was removed, try again")
    return target


def _members(tar: tarfile.TarFile) -> list[tuple[tarfile.TarInfo, str]]:
    """(member, path below vendor/llama.cpp/) for what a build reads; unsafe names refused."""
    out = []
    for m in tar.getmembers():
        parts = m.name.split("/")
        if ".." in parts or m.name.startswith("/"):
            raise SourceError(f"refusing an unsafe path in the source tarball: {m.name!r}")
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
            for m, rel in members:
                target = tmp / rel
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
