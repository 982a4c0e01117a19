"""The store archive (``localllm export``): its format, its table, and writing one.

An archive is one **tar** file (POSIX pax format, uncompressed) holding, in this order:

- ``localllm-archive.json``: the table, every other member's name, size and sha256;
- ``manifests/<host>/<namespace>/<model>/<tag>``: each model's manifest, as stored;
- ``blobs/sha256-<hex>``: every blob those manifests name, once each.

Why tar: it is a stream, so an archive can be written to a pipe and read from
one (``export … -o - | ssh … localllm import -``) with nothing buffered, and the
table can come first; every member's size is in its header, so a cut copy is
told from a complete one; pax headers carry members over 8 GiB (plain ustar
cannot) and long names; and any ``tar`` can list or unpack it.  No compression:
quantized weights do not shrink, and a compressed archive could not be resumed
from where a copy stopped.  Zip keeps its directory at the end and cannot be read
from a pipe.

Nothing in an archive is trusted: ``read_table`` accepts only names of the three
forms above (so no member can name a path outside the store: blobs are stored by
digest, manifests by a validated model name), each blob's sha256 must be its
name, and sizes are bounded where they are read whole.  Writing an archive is
``store/archive_export.py``, reading one ``store/archive_import.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from localllm import __version__
from localllm.errors import InvalidName, InvalidRequest, LocalLLMError
from localllm.store.manifests import MAX_MANIFEST_BYTES, Manifest
from localllm.store.names import ModelName, parse_name

TABLE = "localllm-archive.json"
FORMAT = "localllm-archive"
VERSION = 1
MAX_TABLE_BYTES = 8 << 20
MAX_FILES = 100_000
_BLOB_RE = re.compile(r"^blobs/sha256-([0-9a-f]{64})$")


class ArchiveError(LocalLLMError):
    """An archive that cannot be written or read: damaged, cut short, hostile or not ours."""

    status = 400


class MemberJSON(TypedDict):
    """A member as the table lists it."""

    name: str
    size: int
    sha256: str
    mtime_ns: NotRequired[int]


@dataclass(frozen=True)
class Member:
    """One file the table lists: its member name, size and sha256 (hex)."""

    name: str
    size: int
    sha256: str
    # A manifest's mtime, kept so the model reads as modified when it was there
    # (``list``, ``show``); nanoseconds, so it comes back exactly.
    mtime_ns: int | None = None

    def to_json(self) -> MemberJSON:
        out: MemberJSON = {"name": self.name, "size": self.size, "sha256": self.sha256}
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        return out

    @property
    def mtime(self) -> float:
        return self.mtime_ns / 1e9 if self.mtime_ns is not None else time.time()


@dataclass
class Table:
    """The archive's first member: what it holds, in order (manifests, then blobs)."""

    files: list[Member] = field(default_factory=list)

    def manifests(self) -> list[Member]:
        return [m for m in self.files if m.name.startswith("manifests/")]

    def blobs(self) -> dict[str, Member]:
        """digest (``sha256:<hex>``) -> member."""
        return {f"sha256:{m.sha256}": m for m in self.files if m.name.startswith("blobs/")}

    def to_bytes(self) -> bytes:
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "created_by": f"localllm {__version__}",
            "files": [m.to_json() for m in self.files],
        }
        return json.dumps(doc, indent=1).encode() + b"\n"


def manifest_member(name: ModelName) -> str:
    return "manifests/" + "/".join(name.parts)


def model_of(member: str) -> ModelName:
    """The model a ``manifests/…`` member name stands for (validated: ``InvalidName``)."""
    parts = member.split("/")
    if len(parts) != 5 or parts[0] != "manifests":
        raise ArchiveError(f"refusing the archive: {member!r} is not a manifest's name")
    try:
        name = parse_name(f"{parts[1]}/{parts[2]}/{parts[3]}:{parts[4]}")
    except InvalidName:
        raise ArchiveError(f"refusing the archive: {member!r} is not a valid model name") from None
    if name.parts != tuple(parts[1:]):  # parse_name rewrites some hosts (huggingface.co)
        raise ArchiveError(f"refusing the archive: {member!r} is not a model name as stored")
    return name


def read_table(data: bytes) -> Table:
    """Parse and check the table; ``ArchiveError`` saying what is wrong."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ArchiveError(f"the archive's {TABLE} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ArchiveError(f"the archive's {TABLE} is not a localllm archive table")
    if doc.get("version") != VERSION:
        raise ArchiveError(
            f"the archive is format version {doc.get('version')!r}; this localllm reads "
            f"version {VERSION}: import it with a newer localllm"
        )
    files = doc.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise ArchiveError("the archive's table has no list of files (or too many)")
    table = Table()
    seen: set[str] = set()
    for item in files:
        member = _member(item)
        if member.name in seen:
            raise ArchiveError(f"refusing the archive: its table lists {member.name!r} twice")
        seen.add(member.name)
        table.files.append(member)
    for m in table.manifests():
        model_of(m.name)
        if m.size > MAX_MANIFEST_BYTES:
            raise ArchiveError(f"refusing the archive: the manifest {m.name!r} is too large")
    return table


def _member(item: Any) -> Member:
    if not isinstance(item, dict):
        raise ArchiveError("refusing the archive: a table entry is not an object")
    name, size, sha = item.get("name"), item.get("size"), item.get("sha256")
    if (
        not isinstance(name, str)
        or not isinstance(sha, str)
        or not re.fullmatch(r"[0-9a-f]{64}", sha)
    ):
        raise ArchiveError("refusing the archive: a table entry has no name or sha256")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ArchiveError(f"refusing the archive: {name!r} has no valid size in the table")
    mtime_ns = item.get("mtime_ns")
    if mtime_ns is not None and (not isinstance(mtime_ns, int) or isinstance(mtime_ns, bool)):
        raise ArchiveError(f"refusing the archive: {name!r} has an invalid mtime_ns")
    blob = _BLOB_RE.fullmatch(name)
    if blob is not None:
        if blob.group(1) != sha:
            raise ArchiveError(
                f"refusing the archive: the table gives {name!r} the sha256 {sha}, "
                "not the one its name says"
            )
    elif not name.startswith("manifests/"):
        raise ArchiveError(f"refusing the archive: {name!r} is neither a manifest nor a blob")
    return Member(name, size, sha, mtime_ns if name.startswith("manifests/") else None)


# -- reading: what each member must be ---------------------------------------------------


def is_plain(m: tarfile.TarInfo) -> bool:
    """A regular file (sparse ones are not: their holes would be ours to fill)."""
    return m.isreg() and not m.issparse()


def check_member(m: tarfile.TarInfo) -> None:
    """Refuse a member with an unsafe name, or that is not a plain file (links, folders,
    devices, fifos, sparse files), before its place in the table is even looked at."""
    name = m.name
    if name.startswith("/") or any(p in ("", ".", "..") for p in name.split("/")):
        raise ArchiveError(f"refusing the archive: unsafe path {name!r}")
    if m.issym() or m.islnk():
        raise ArchiveError(f"refusing the archive: {name!r} is a link (to {m.linkname!r})")
    if not is_plain(m):
        raise ArchiveError(
            f"refusing the archive: {name!r} is a folder, device, fifo or sparse file"
        )


def check_manifest(
    expected: Member, data: bytes, held: dict[str, Member]
) -> tuple[ModelName, Manifest]:
    """The model a manifest member holds, checked: its sha256 is the table's, and every
    blob it names is in the archive (``held``, by digest) with the size it says."""
    if hashlib.sha256(data).hexdigest() != expected.sha256:
        raise ArchiveError(f"refusing the archive: {expected.name!r} does not match its sha256")
    name = model_of(expected.name)
    try:
        manifest = Manifest.from_bytes(data)
    except InvalidRequest as exc:
        raise ArchiveError(f"refusing the archive: {expected.name!r}: {exc.message}") from None
    for layer in [manifest.config, *manifest.layers]:
        blob = held.get(layer.digest)
        if blob is None:
            raise ArchiveError(
                f"refusing the archive: {name.display} names blob {layer.digest}, "
                "which the archive does not hold"
            )
        if blob.size != layer.size:
            raise ArchiveError(
                f"refusing the archive: {name.display} says blob {layer.digest} is "
                f"{layer.size} bytes, the archive holds {blob.size}"
            )
    return name, manifest
