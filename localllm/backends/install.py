"""``localllm backends install FILE``: a pack checked, fitted to this machine and put in place.

A pack's code runs in every runner, so nothing of it is used before three
checks pass, in this order: the sha256 of the whole file is in the table this
release ships (``trusted.toml``, package data) or is the one the user passed
with ``--trust`` after seeing it; its manifest is well formed and for this
platform, this core's ggml version and commit, and the GPU architectures here
(``manifest``: each refusal says why and what to do instead); and, while it is
unpacked, every member is a regular file or folder the manifest lists, with a
safe name (the member checks of ``source``: no absolute or ``..`` names, no
links, no devices), of the listed size and sha256.  The manifest must come first, so the
pack is read as a stream.

The path is opened once: its bytes are hashed as they are copied into an
unnamed temporary file only this process can reach, and that copy is what is
unpacked.  Hashing the path and then opening it again would unpack whatever
sits there by then: a file swapped in after the hash, or rewritten in place by
anyone who can write it.

Installing is all or nothing: the files land in a temporary folder inside the
plugins folder (the same file system), are checked by ``trust`` exactly where
they will load from, and are renamed into place, the runtime libraries first
and the plugin last.  A CUDA pack that names NVIDIA's runtime wheels instead
of carrying them gets them first (``cuda.runtime_wheels.ensure``: once into
the cache, hash-checked, from ``--wheels DIR`` or the package index).  A record
of the pack (``.<plugin>.pack.json``) stays beside the plugin for ``backends
list``, for the loader (which runtime to load first) and for packing it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import tomllib
import zlib
from dataclasses import dataclass, field
from importlib.resources import files as package_files
from pathlib import Path
from typing import IO

from localllm import paths
from localllm.backends import source, trust
from localllm.backends.layout import record_path
from localllm.backends.manifest import (
    Core,
    FileEntry,
    PackError,
    PackManifest,
    PackRecord,
    check_fits,
    check_manifest,
)
from localllm.backends.pack import MANIFEST
from localllm.store.tempfiles import atomic_write_bytes

MAX_MANIFEST = 1 << 20


@dataclass(frozen=True)
class Installed:
    backend: str
    plugin: Path
    sha256: str
    trusted_by: str  # "the table" or "--trust"
    manifest: PackManifest
    runtime: list[str] = field(default_factory=list)  # what was done for its runtime wheels


def trusted_table() -> dict[str, str]:
    """sha256 -> pack file name, for every pack this release accepts without ``--trust``."""
    text = (package_files("localllm.backends") / "trusted.toml").read_text()
    return {
        str(p["sha256"]).lower(): str(p.get("file", ""))
        for p in tomllib.loads(text).get("pack", [])
    }


def check_trust(sha256: str, trust_arg: str | None, where: str) -> str:
    """How the pack with ``sha256`` is trusted, or ``PackError`` saying how to trust it."""
    if sha256 in trusted_table():
        return "the table"
    if trust_arg:
        given = trust_arg.strip().lower().removeprefix("sha256:")
        if given == sha256:
            return "--trust"
        raise PackError(
            f"{where} has sha256 {sha256}, not the {given} given with --trust; "
            "nothing was installed"
        )
    raise PackError(
        f"{where} has sha256 {sha256}, which is not in this localllm's table of "
        "known packs. A plugin runs with your rights: install it only if you "
        f"know where it comes from, with --trust {sha256}"
    )


def _read_manifest(tar: tarfile.TarFile, where: str) -> tuple[PackManifest, tarfile.TarInfo]:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile() or first.size > MAX_MANIFEST:
        raise PackError(f"{where} is not a plugin pack: it does not start with a {MANIFEST}")
    fh = tar.extractfile(first)
    try:
        value = json.loads(fh.read() if fh else b"")
    except ValueError:
        raise PackError(f"{where}: the manifest is not JSON") from None
    return check_manifest(value), first


def _private_copy(pack_file: Path, into: Path) -> tuple[IO[bytes], str]:
    """The bytes of ``pack_file``, read once, in an unnamed temporary file in ``into``
    (rewound), and their sha256: what is checked is what is unpacked."""
    h = hashlib.sha256()
    copy = tempfile.TemporaryFile(dir=into)  # the caller closes it
    try:
        with open(pack_file, "rb") as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                copy.write(chunk)
        copy.flush()
        copy.seek(0)
    except BaseException:
        copy.close()
        raise
    return copy, h.hexdigest()


def _copy(src: IO[bytes], dst: Path, size: int) -> str:
    h = hashlib.sha256()
    left = size
    with open(dst, "wb") as out:
        while left and (chunk := src.read(min(1 << 20, left))):
            out.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def _unpack(tar: tarfile.TarFile, m: PackManifest, manifest: tarfile.TarInfo, tmp: Path) -> None:
    """Every member into ``tmp``, each checked against the manifest as it streams by."""
    listed: dict[str, FileEntry] = m["files"]
    seen: set[str] = set()
    for member in tar:
        if member is manifest:  # iterating starts again from the first member, read already
            continue
        try:
            parts = source._check_member(member)
        except source.SourceError as exc:
            raise PackError(str(exc).replace("source tarball", "pack")) from None
        name = "/".join(parts)
        if member.isdir() and name == m["libs_folder"]:
            continue
        if not member.isfile():
            raise PackError(
                f"refusing the pack: {member.name!r} is a link or a folder it does not list"
            )
        if name not in listed or name in seen:
            raise PackError(
                f"refusing the pack: {member.name!r} is not in its manifest"
                + (" (or twice in the pack)" if name in seen else "")
            )
        seen.add(name)
        want = listed[name]
        if member.size != want["size"]:
            raise PackError(
                f"refusing the pack: {name} is {member.size} bytes, the manifest "
                f"says {want['size']}"
            )
        dst = tmp / name
        dst.parent.mkdir(mode=0o755, exist_ok=True)
        dst.parent.chmod(0o755)
        fh = tar.extractfile(member)
        got = _copy(fh, dst, member.size) if fh else ""
        if got != want["sha256"]:
            raise PackError(
                f"refusing the pack: {name} has sha256 {got}, the manifest says {want['sha256']}"
            )
        dst.chmod(0o755)
    if seen != set(listed):
        gone = ", ".join(sorted(set(listed) - seen))
        raise PackError(f"refusing the pack: the manifest lists {gone}, which it does not hold")


def _swap_in(new: Path, final: Path) -> None:
    """Put folder ``new`` at ``final``: the old one is renamed away first, removed after."""
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    if final.exists():
        os.replace(final, old)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)


def install(
    pack_file: Path,
    core: Core,
    *,
    trust_arg: str | None = None,
    origin: str = "",
    sha256: str = "",
    wheels: Path | None = None,
) -> Installed:
    """Check and install the pack at ``pack_file`` (see the module docstring); ``sha256``:
    the hash the caller expects (a download's), checked against the bytes read; ``wheels``:
    a folder with the runtime wheels the pack names (or an environment that has them)."""
    where = origin or str(pack_file)
    try:
        trust.make_dirs(paths.backends())
        copy, sha = _private_copy(pack_file, paths.backends())
    except OSError as exc:
        raise PackError(f"cannot read {where}: {exc.strerror or exc}") from None
    with copy:
        if sha256 and sha256.lower() != sha:
            raise PackError(
                f"{where} has sha256 {sha}, not the {sha256} it was downloaded as; "
                "nothing was installed"
            )
        return _install(copy, sha, core, where, check_trust(sha, trust_arg, where), wheels)


def _install(
    pack: IO[bytes], sha: str, core: Core, where: str, how: str, wheels: Path | None
) -> Installed:
    folder = paths.backends() / core.ggml_version
    tmp = folder / f".tmp-pack-{os.getpid()}"
    try:
        with tarfile.open(fileobj=pack, mode="r|gz") as tar:
            m, first = _read_manifest(tar, where)
            check_fits(m, core)
            trust.make_dirs(folder)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o755)
            tmp.chmod(0o755)
            _unpack(tar, m, first, tmp)
        runtime = _runtime(m, wheels)
        final = _put_in_place(
            tmp, folder, m, {"pack_sha256": sha, "origin": where, "trusted_by": how}
        )
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise PackError(
            f"{where} is not a readable plugin pack ({exc}); nothing was installed"
        ) from None
    except OSError as exc:
        raise PackError(f"installing {where} into {folder} failed: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Installed(m["backend"], final, sha, how, m, runtime)


def _runtime(m: PackManifest, wheels: Path | None) -> list[str]:
    """The runtime wheels the pack names, in the cache before its plugin is in place."""
    if "runtime" not in m:
        return []
    from localllm.backends.cuda import runtime_wheels
    from localllm.backends.cuda.unpack import CudaWheelError

    log_path = paths.logs() / "backend-runtime.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log_path.open("a") as log:
            return runtime_wheels.ensure(m["runtime"], wheels, log)
    except CudaWheelError as exc:
        raise PackError(f"{exc}; nothing was installed (pip's output: {log_path})") from None


def _put_in_place(tmp: Path, folder: Path, m: PackManifest, origin: dict[str, str]) -> Path:
    """Rename the checked files from ``tmp`` into ``folder``: libraries, record, plugin."""
    plugin_tmp, final = tmp / str(m["plugin"]), folder / str(m["plugin"])
    # Checked where it sits, one folder below where it will load from: the same chain.
    why = trust.why_unsafe(plugin_tmp, paths.backends())
    if why:
        raise PackError(why.replace(str(plugin_tmp), str(final)))
    libs = folder / m["libs_folder"]
    has_libs = (tmp / m["libs_folder"]).is_dir()
    if has_libs:
        _swap_in(tmp / m["libs_folder"], libs)
    os.replace(plugin_tmp, final)
    st = final.stat()
    record: PackRecord = {
        **m,
        "pack_sha256": origin["pack_sha256"],
        "origin": origin["origin"],
        "trusted_by": origin["trusted_by"],
        "plugin_size": st.st_size,
        "plugin_mtime_ns": st.st_mtime_ns,
        "plugin_sha256": m["files"][m["plugin"]]["sha256"],
    }
    atomic_write_bytes(record_path(final), json.dumps(record, indent=2).encode() + b"\n")
    if not has_libs:
        shutil.rmtree(libs, ignore_errors=True)  # an earlier pack's, now unused
    return final
