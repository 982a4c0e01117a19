"""The disk prompt cache's files (``diskcache.py``): what a model is, one copy's bytes, and
who may have written them.

A file is ``MAGIC``, the header's length, a JSON header (the model's identity,
the adapters, ``exact``, the token count, the data size and a MAC), the tokens
(int32) and llama.cpp's bytes.  It is written to a temporary name
(``.<pid>.<name>.tmp``), synced and renamed into place, so a reader sees a whole
file or none; ``read_header`` accepts only a file of the given identity exactly as
long as its header says.

The cache holds what was asked, and its bytes go into ``llama_state_seq_set_data``:
files are created 0600 in folders kept 0700 (``private_dir``), a folder or file that
another account owns or may write is refused (``foreign``), and the MAC is an
HMAC-SHA256 over the header, the tokens and the cells under a key only this user
can read (``load_key``: a 0600 file in the config folder), so a file planted where
permissions were loosened, or copied from another machine, is refused too.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import struct
import time
from pathlib import Path
from typing import Any, BinaryIO, TypedDict

MAGIC = b"LLPCACHE"
FORMAT = 2  # 2: an HMAC instead of a plain sha256 (1's files are refused and deleted)
SUFFIX = ".llpc"
WHOLE_HASH = 64 << 20  # model files up to this size are hashed whole
_BLOB = re.compile(r"sha256-([0-9a-f]{64})")
_HEAD = struct.Struct("<8sI")


def file_identity(path: str) -> str:
    """What a model file is: its digest when it is a store blob (verified when pulled),
    else a hash of its content (of its first MiB with its size and mtime, when large)."""
    m = _BLOB.fullmatch(os.path.basename(path))
    if m:
        return "sha256:" + m.group(1)
    st = os.stat(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if st.st_size <= WHOLE_HASH:
            while chunk := f.read(1 << 20):
                h.update(chunk)
            return "sha256:" + h.hexdigest()
        h.update(f.read(1 << 20))
    return f"file:{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}:{h.hexdigest()}"


class Identity(TypedDict):
    """What makes saved cells valid (``model_identity``); a file holds its writer's."""

    format: int
    llama: str
    model: list[str]
    kv_type: str
    flash_attn: str


class _HeaderFields(TypedDict):
    identity: Identity
    adapters: list[str]
    exact: int
    n_tokens: int
    size: int


class Header(_HeaderFields, total=False):
    """A file's JSON header; ``mac`` is added last, over the rest (``mac``)."""

    mac: str


def model_identity(paths: list[str], llama_version: str, kv_type: str, flash_attn: str) -> Identity:
    """What makes saved cells valid: the model files, libllama and this format, the KV cache
    type and flash attention (llama.cpp stores V transposed without it)."""
    return {
        "format": FORMAT,
        "llama": llama_version,
        "model": [file_identity(p) for p in paths],
        "kv_type": kv_type,
        "flash_attn": flash_attn,
    }


def key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:32]


def pack_tokens(tokens: list[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}i", *tokens)


def mac(key: bytes, meta: Header, tokens: bytes, data: Any) -> str:
    """The file's MAC: its header (less the MAC itself), tokens and cells, under ``key``."""
    head = {k: v for k, v in meta.items() if k != "mac"}
    h = hmac.new(key, json.dumps(head, sort_keys=True).encode(), hashlib.sha256)
    h.update(tokens)
    h.update(data)
    return h.hexdigest()


KEY_BYTES = 32


def load_key(path: Path) -> bytes:
    """The cache's key: read from ``path``, or made there (0600, in a 0700 folder) when it
    does not exist; ValueError when the file is another account's or others may read it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        why = foreign(st, private=True)
        if why:
            raise ValueError(f"{path} {why}")
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path} is not a key of {KEY_BYTES} bytes")
    return key


def foreign(st: os.stat_result, *, private: bool = False) -> str | None:
    """Why a file or folder with this ``stat`` is not to be trusted (None: it is ours):
    another account owns it, or others may write it (``private``: or read it)."""
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return "belongs to another user"
    loose = stat.S_IMODE(st.st_mode) & (0o077 if private else 0o022)
    if loose:
        kind = "read or written" if private else "written"
        return f"may be {kind} by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_dir(path: Path) -> None:
    """Make ``path`` (0700) or check it: ValueError when it is not ours or others may write
    it.  One of ours that others may only read (an older version's 0755) is closed."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{path} is not a folder")
    why = foreign(st)
    if why:
        raise ValueError(f"{path} {why}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)


def checked_header(
    f: BinaryIO, identity: Identity
) -> tuple[os.stat_result, tuple[Header, list[int]] | None]:
    """An open cache file's ``stat`` and what ``read_header`` makes of it; ValueError when
    the file is not to be trusted (``foreign``)."""
    st = os.fstat(f.fileno())
    why = foreign(st)
    if why:
        raise ValueError(why)
    return st, read_header(f, st.st_size, identity)


def read_header(f: BinaryIO, file_size: int, identity: Identity) -> tuple[Header, list[int]] | None:
    """The header and tokens of an open cache file, None unless they are whole, of this
    identity, and the file is exactly as long as they say (the data is read next)."""
    magic, hlen = _HEAD.unpack(f.read(_HEAD.size))
    if magic != MAGIC or hlen > 1 << 20:
        return None
    meta: Header = json.loads(f.read(hlen))
    n, size = int(meta["n_tokens"]), int(meta["size"])
    if meta.get("identity") != identity or n <= 0 or size <= 0:
        return None
    if file_size != _HEAD.size + hlen + 4 * n + size:
        return None
    return meta, list(struct.unpack(f"<{n}i", f.read(4 * n)))


def write(path: Path, meta: Header, raw: bytes, data: Any) -> None:
    """Write a cache file atomically: a temporary name, synced, renamed into place."""
    head = json.dumps(meta).encode()
    tmp = path.with_name(f".{os.getpid()}.{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # private from birth
        with os.fdopen(fd, "wb") as f:
            for part in (_HEAD.pack(MAGIC, len(head)), head, raw, data):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def sweep_temp(path: Path) -> None:
    """Delete a temporary file whose writer is gone: the runner (its pid is in the name)
    ended mid-write, or the file is an hour old."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(path.name.split(".")[1])
        if time.time() - path.stat().st_mtime > 3600 or not _alive(pid):
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    return True
