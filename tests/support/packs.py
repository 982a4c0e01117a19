"""Plugin packs for the tests: real ones from the RPC plugin CI builds, and hand-made bad ones.

``real_pack`` packs a copy of the shared RPC plugin (tests/support/rpcworker.py) with
``backends.pack`` itself, in a backends folder of the test's own; the shared
folder is only ever read.  ``write_pack`` writes any tar.gz from a manifest
and a list of members, so a test can make exactly the pack it needs: an
escaping name, a link, a device, a wrong size or hash, the manifest last.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from localllm.backends import install, manifest, pack

COMMIT = "0c1e570"


@dataclass
class Member:
    name: str
    data: bytes = b""
    kind: bytes = tarfile.REGTYPE  # REGTYPE, DIRTYPE, SYMTYPE, LNKTYPE, CHRTYPE, FIFOTYPE
    link: str = ""
    size: int | None = None  # a size to declare other than len(data)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_for(
    files: dict[str, bytes], *, backend: str = "rpc", ggml_version: str, **over: Any
) -> dict[str, Any]:
    b = {"rpc": "libggml-rpc.so", "cuda": "libggml-cuda.so"}[backend]
    m: dict[str, Any] = {
        "format": pack.FORMAT,
        "backend": backend,
        "plugin": b,
        "ggml_version": ggml_version,
        "ggml_commit": COMMIT,
        "architectures": [],
        "toolkit": "GNU 12",
        "made_by": "tests",
        "platform": pack.platform_tag(),
        "libs_folder": pack.libs_folder(backend),
        "system_libs": [],
        "files": {n: {"sha256": sha(d), "size": len(d)} for n, d in files.items()},
    }
    m.update(over)
    return m


def write_pack(
    path: Path,
    manifest: dict[str, Any] | None,
    members: list[Member],
    *,
    manifest_last: bool = False,
) -> Path:
    """A tar.gz at ``path``: ``manifest.json`` (first, unless ``manifest_last``) and members."""
    entries = list(members)
    if manifest is not None:
        m = Member(pack.MANIFEST, json.dumps(manifest).encode())
        entries = [*entries, m] if manifest_last else [m, *entries]
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type, info.linkname, info.mode = e.kind, e.link, 0o755
            if e.kind == tarfile.REGTYPE:
                info.size = len(e.data) if e.size is None else e.size
                data = e.data if e.size is None else (e.data + b"\0" * e.size)[: e.size]
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    path.write_bytes(raw.getvalue())
    return path


def copy_backends(rpc_backends: Path, dest: Path) -> tuple[Path, str]:
    """A backends folder of the test's own with a copy of the shared RPC plugin."""
    (src,) = rpc_backends.glob("*/libggml-rpc.so")
    version = src.parent.name
    (dest / version).mkdir(parents=True)
    shutil.copy2(src, dest / version / src.name)
    return dest, version


def use_backends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rpc_backends: Path
) -> tuple[Path, str]:
    """LOCALLLM_BACKENDS and LOCALLLM_CACHE of the test's own, the RPC plugin copied in."""
    root, version = copy_backends(rpc_backends, tmp_path / "backends")
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(root))
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    return root, version


def real_pack(version: str, out: Path) -> pack.Packed:
    """The installed RPC plugin packed by ``backends.pack``, written into folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    return pack.make("rpc", ggml_version=version, ggml_commit=COMMIT + "-dirty", out=out)


def trust_only(monkeypatch: pytest.MonkeyPatch, *hashes: str) -> None:
    """Make the shipped table hold exactly ``hashes``."""
    monkeypatch.setattr(install, "trusted_table", lambda: {h: "test pack" for h in hashes})


def core(version: str, **over: Any) -> manifest.Core:
    return manifest.Core(**{"ggml_version": version, "ggml_commit": COMMIT, "archs": [], **over})
