"""``localllm backends install FILE``: a pack checked, fitted to this machine and put in place.

A pack's code runs in every runner, so nothing of it is used before three
checks pass, in this order: the sha256 of the whole file is in the table this
release ships (``trusted.toml``, package data) or is the one the user passed
with ``--trust`` after seeing it; its manifest is for this platform, this
core's ggml version and commit, and covers the GPU architectures here (each
refusal says which and what to do instead); and, while it is unpacked, every
member is a regular file or folder the manifest lists, with a safe name (the
member checks of ``source``: no absolute or ``..`` names, no links, no
devices), of the listed size and sha256.  The manifest must come first, so the
file is read once, as a stream.

Installing is all or nothing: the files land in a temporary folder inside the
plugins folder (the same file system), are checked by ``trust`` exactly where
they will load from, and are renamed into place, the runtime libraries first
and the plugin last.  A record of the pack (``.<plugin>.pack.json``) stays
beside the plugin for ``backends list`` and for packing it again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tomllib
import zlib
from dataclasses import dataclass, field
from importlib.resources import files as package_files
from pathlib import Path
from typing import IO, Any

from localllm import paths
from localllm.backends import catalog, source, trust
from localllm.backends.pack import (
    FORMAT,
    MANIFEST,
    PackError,
    check_archs,
    libs_folder,
    platform_tag,
    record_path,
)
from localllm.errors import LocalLLMError
from localllm.store.blobs import atomic_write_bytes

MAX_MANIFEST = 1 << 20
MAX_FILES = 64
MAX_BYTES = 16 << 30  # all files together, unpacked
_SHA = re.compile(r"[0-9a-f]{64}")
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


@dataclass(frozen=True)
class Core:
    """What a pack must fit: this core's ggml, this platform, the GPUs here."""

    ggml_version: str
    ggml_commit: str = ""
    archs: list[str] | None = None  # GPU architectures (--arch); None: ask the drivers
    platform: str = field(default_factory=platform_tag)

    def archs_for(self, backend: str) -> list[str]:
        return self.archs if self.archs is not None else machine_archs(backend)


def machine_archs(backend: str) -> list[str]:
    """The architectures of this machine's GPUs for ``backend`` (cuda, rocm), else []."""
    from localllm.backends.toolkit import cuda_archs
    from localllm.hardware.probes import run_tool

    if backend == "cuda":
        return cuda_archs(run_tool(["nvidia-smi", "--query-gpu=compute_cap",
                                    "--format=csv,noheader"]) or "")
    if backend == "rocm":
        return sorted(set(re.findall(r"\bgfx[0-9a-f]+\b", run_tool(["rocminfo"]) or "")))
    return []


@dataclass(frozen=True)
class Installed:
    backend: str
    plugin: Path
    sha256: str
    trusted_by: str  # "the table" or "--trust"
    manifest: dict[str, Any]


def trusted_table() -> dict[str, str]:
    """sha256 -> pack file name, for every pack this release accepts without ``--trust``."""
    text = (package_files("localllm.backends") / "trusted.toml").read_text()
    return {str(p["sha256"]).lower(): str(p.get("file", "")) for p in
            tomllib.loads(text).get("pack", [])}


def check_trust(sha256: str, trust_arg: str | None, where: str) -> str:
    """How the pack with ``sha256`` is trusted, or ``PackError`` saying how to trust it."""
    if sha256 in trusted_table():
        return "the table"
    if trust_arg:
        given = trust_arg.strip().lower().removeprefix("sha256:")
        if given == sha256:
            return "--trust"
        raise PackError(f"{where} has sha256 {sha256}, not the {given} given with --trust; "
                        "nothing was installed")
    raise PackError(f"{where} has sha256 {sha256}, which is not in this localllm's table of "
                    "known packs. A plugin runs with your rights: install it only if you "
                    f"know where it comes from, with --trust {sha256}")


def uncovered(backend: str, pack_archs: list[str], here: list[str]) -> list[str]:
    """The GPU architectures ``here`` that a pack built for ``pack_archs`` cannot run on.

    CUDA: an architecture runs its own machine code ("90" or "90-real"), or the PTX
    of an older plain one ("80" or "80-virtual") compiled at load; "90a" only on 90.
    """
    if backend not in ("cuda", "rocm"):
        return []
    if backend == "rocm":
        return [a for a in here if a not in {p.split(":")[0] for p in pack_archs}]
    out = []
    for gpu in here:
        ok = False
        for a in pack_archs:
            base, _, kind = a.partition("-")
            if kind != "virtual" and base == gpu:
                ok = True
            elif kind != "real" and base.isdigit() and gpu.isdigit() and int(base) <= int(gpu):
                ok = True
        if not ok:
            out.append(gpu)
    return out


def _refuse(manifest: dict[str, Any], why: str) -> PackError:
    return PackError(f"this {manifest.get('backend', '?')} pack does not fit: {why}; nothing was "
                     "installed")


def check_manifest(m: Any) -> dict[str, Any]:
    """``m`` if it is a well-formed manifest, else ``PackError`` naming the fault."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        fmt = m.get("format") if isinstance(m, dict) else None
        raise PackError(f"the pack's manifest is format {fmt!r}; this localllm reads format "
                        f"{FORMAT} (a newer localllm made it?)")
    try:
        backend = catalog.get(str(m["backend"]))
        strings = [m[k] for k in ("plugin", "ggml_version", "ggml_commit", "toolkit",
                                  "platform", "libs_folder")]
        if not all(isinstance(s, str) for s in strings) or m["plugin"] != backend.filename \
                or m["libs_folder"] != libs_folder(backend.name):
            raise PackError("its plugin or libraries folder is misnamed")
        archs = m["architectures"]
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise PackError("architectures is not a list of names")
        check_archs(backend.name, archs)
        listed = m["files"]
        if not isinstance(listed, dict) or m["plugin"] not in listed or \
                len(listed) > MAX_FILES:
            raise PackError("its file list does not hold the plugin")
        total = 0
        for name, entry in listed.items():
            parts = name.split("/")
            lib = len(parts) == 2 and parts[0] == m["libs_folder"] and _FILE.fullmatch(parts[1])
            if name != m["plugin"] and not lib:
                raise PackError(f"it lists a file outside its folders: {name!r}")
            if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                    and _SHA.fullmatch(entry["sha256"]) and isinstance(entry.get("size"), int)
                    and entry["size"] >= 0):
                raise PackError(f"the entry of {name!r} has no sha256 and size")
            total += entry["size"]
        if total > MAX_BYTES:
            raise PackError(f"its files add up to {total} bytes, more than {MAX_BYTES}")
    except (KeyError, TypeError) as exc:
        raise PackError(f"the pack's manifest is malformed ({exc})") from None
    except LocalLLMError as exc:  # ours, or catalog.get's for an unknown backend
        raise PackError(f"the pack's manifest is malformed: {exc}") from None
    return m


def check_fits(m: dict[str, Any], core: Core) -> None:
    """``PackError`` with the reason when the pack is for another machine or core."""
    if m["platform"] != core.platform:
        raise _refuse(m, f"it is for {m['platform']}, this machine is {core.platform}")
    if m["ggml_version"] != core.ggml_version:
        raise _refuse(m, f"it is for ggml {m['ggml_version']}, but this localllm's core is ggml "
                         f"{core.ggml_version or 'unknown'} (a plugin of another version is "
                         f"refused at load). Get a pack for ggml {core.ggml_version}, or build "
                         f"it: 'localllm backends build {m['backend']}'")
    have, want = m["ggml_commit"], core.ggml_commit.removesuffix("-dirty")
    if have and want and not (have.startswith(want) or want.startswith(have)):
        raise _refuse(m, f"it was built from ggml commit {have}, the core from {want}: the "
                         "same version number, other code. Build it here instead")
    archs = core.archs_for(m["backend"])
    if m["backend"] in ("cuda", "rocm") and not archs:
        raise _refuse(m, "no GPU of this machine answered, so its architecture is unknown: "
                         "pass --arch (e.g. --arch 90 for an H100)")
    missing = uncovered(m["backend"], m["architectures"], archs)
    if missing:
        raise _refuse(m, f"it is built for {', '.join(m['architectures'])}, but this "
                         f"machine's GPUs are {', '.join(archs)} ({', '.join(missing)} "
                         "not covered)")


def _read_manifest(tar: tarfile.TarFile, where: str) -> tuple[dict[str, Any], tarfile.TarInfo]:
    first = tar.next()
    if first is None or first.name != MANIFEST or not first.isfile() or \
            first.size > MAX_MANIFEST:
        raise PackError(f"{where} is not a plugin pack: it does not start with a {MANIFEST}")
    fh = tar.extractfile(first)
    try:
        value = json.loads(fh.read() if fh else b"")
    except ValueError:
        raise PackError(f"{where}: the manifest is not JSON") from None
    return check_manifest(value), first


def _copy(src: IO[bytes], dst: Path, size: int) -> str:
    import hashlib

    h = hashlib.sha256()
    left = size
    with open(dst, "wb") as out:
        while left and (chunk := src.read(min(1 << 20, left))):
            out.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def _unpack(tar: tarfile.TarFile, m: dict[str, Any], manifest: tarfile.TarInfo,
            tmp: Path) -> None:
    """Every member into ``tmp``, each checked against the manifest as it streams by."""
    listed: dict[str, Any] = m["files"]
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
            raise PackError(f"refusing the pack: {member.name!r} is a link or a folder it "
                            "does not list")
        if name not in listed or name in seen:
            raise PackError(f"refusing the pack: {member.name!r} is not in its manifest"
                            + (" (or twice in the pack)" if name in seen else ""))
        seen.add(name)
        want = listed[name]
        if member.size != want["size"]:
            raise PackError(f"refusing the pack: {name} is {member.size} bytes, the manifest "
                            f"says {want['size']}")
        dst = tmp / name
        dst.parent.mkdir(mode=0o755, exist_ok=True)
        dst.parent.chmod(0o755)
        fh = tar.extractfile(member)
        got = _copy(fh, dst, member.size) if fh else ""
        if got != want["sha256"]:
            raise PackError(f"refusing the pack: {name} has sha256 {got}, the manifest says "
                            f"{want['sha256']}")
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


def install(pack_file: Path, core: Core, *, trust_arg: str | None = None,
            origin: str = "", sha256: str = "") -> Installed:
    """Check and install the pack at ``pack_file`` (see the module docstring); ``sha256``:
    the file's hash when the caller has just checked it (a download), else computed."""
    where = origin or str(pack_file)
    sha = sha256 or source.sha256_of(pack_file)
    how = check_trust(sha, trust_arg, where)
    folder = paths.backends() / core.ggml_version
    tmp = folder / f".tmp-pack-{os.getpid()}"
    try:
        with tarfile.open(pack_file, "r|gz") as tar:
            m, first = _read_manifest(tar, where)
            check_fits(m, core)
            trust.make_dirs(folder)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o755)
            tmp.chmod(0o755)
            _unpack(tar, m, first, tmp)
        final = _put_in_place(tmp, folder, m, {"pack_sha256": sha, "origin": where,
                                               "trusted_by": how})
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise PackError(f"{where} is not a readable plugin pack ({exc}); nothing was "
                        "installed") from None
    except OSError as exc:
        raise PackError(f"installing {where} into {folder} failed: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Installed(m["backend"], final, sha, how, m)


def _put_in_place(tmp: Path, folder: Path, m: dict[str, Any], origin: dict[str, str]) -> Path:
    """Rename the checked files from ``tmp`` into ``folder``: libraries, record, plugin."""
    plugin_tmp, final = tmp / m["plugin"], folder / m["plugin"]
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
    record = {**m, **origin, "plugin_size": st.st_size, "plugin_mtime_ns": st.st_mtime_ns,
              "plugin_sha256": m["files"][m["plugin"]]["sha256"]}
    atomic_write_bytes(record_path(final), json.dumps(record, indent=2).encode() + b"\n")
    if not has_libs:
        shutil.rmtree(libs, ignore_errors=True)  # an earlier pack's, now unused
    return final
