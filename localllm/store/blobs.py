"""Content-addressed blobs: ``blobs/sha256-<hex>``.

A blob is only ever visible under its final name once its bytes hash to that
name: writers stream into a temporary file in the same folder, hash as they go,
fsync, and rename.  Partial downloads live beside it as
``sha256-<hex>-partial`` so a pull can resume; they are never read as blobs.
Start-up keeps them; ``localllm prune --partials`` removes those no live process
is writing (``BlobStore.partials`` and ``tempfiles.open_by_live_process``).

A ``BlobWriter`` given ``keep_free`` (the daemon's ``LOCALLLM_MIN_FREE_DISK``)
refuses, with ``diskspace.NoSpace`` (507), a blob that would leave less than that free:
up front for a declared size, and again every few MiB as bytes arrive, since an
upload may declare nothing and other writers share the disk.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from localllm.errors import BlobNotFound, DigestMismatch
from localllm.store.diskspace import check_room, disk_full_is_no_space
from localllm.store.names import digest_filename, parse_digest
from localllm.store.tempfiles import TMP_PREFIX, fsync_dir, stale_tmp, tmp_name

CHUNK = 1 << 20
# How many bytes a keep_free writer takes between two looks at the free space: the
# most it can overshoot by, and a statvfs per this many bytes is nothing.
ROOM_CHECK_BYTES = 4 << 20
# Largest text layer (template, system, license, params, messages) the store reads back
# whole.  Create refuses anything larger (modelfile/checks.py), so every model it lists
# can be shown and run.
MAX_TEXT_LAYER = 16 << 20


def sha256_file(path: Path, *, already: hashlib._Hash | None = None, start: int = 0) -> str:
    """Hash a file (optionally continuing a hash that already covers ``start`` bytes)."""
    h = already if already is not None else hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(start)
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


class BlobStore:
    """The ``blobs/`` folder of a model store."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        return self.root / digest_filename(digest)

    def partial_path(self, digest: str) -> Path:
        return self.root / (digest_filename(digest) + "-partial")

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def size(self, digest: str) -> int:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            raise BlobNotFound(f'blob "{parse_digest(digest)}" not found') from None

    def open(self, digest: str) -> BinaryIO:
        try:
            return open(self.path(digest), "rb")
        except FileNotFoundError:
            raise BlobNotFound(f'blob "{parse_digest(digest)}" not found') from None

    def read_bytes(self, digest: str, limit: int = MAX_TEXT_LAYER) -> bytes:
        """Read a small blob (params, template, ...) whole; refuses anything over ``limit``."""
        with self.open(digest) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise DigestMismatch(f"blob {digest} is larger than expected for a text layer")
        return data

    def _tmp(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / tmp_name()

    def write_stream(self, chunks: Iterable[bytes], expected: str | None = None) -> tuple[str, int]:
        """Store a byte stream as a blob, verifying ``expected`` when given.

        Returns ``(digest, size)``.  On a mismatch nothing is left behind.
        """
        want = parse_digest(expected) if expected else None
        tmp = self._tmp()
        h = hashlib.sha256()
        size = 0
        try:
            with open(tmp, "wb") as fh:
                for chunk in chunks:
                    h.update(chunk)
                    fh.write(chunk)
                    size += len(chunk)
                fh.flush()
                os.fsync(fh.fileno())
            got = f"sha256:{h.hexdigest()}"
            if want is not None and got != want:
                raise DigestMismatch(f'digest mismatch, expected "{want}", got "{got}"')
            self._commit(tmp, got)
            return got, size
        finally:
            tmp.unlink(missing_ok=True)

    def writer(
        self, expected: str | None = None, *, keep_free: int = 0, size: int | None = None
    ) -> BlobWriter:
        """A blob written piece by piece (``write``, then ``commit`` or ``abort``): for
        callers that receive the bytes asynchronously and must not hold a thread.
        ``keep_free``: bytes the disk must keep free (``NoSpace`` otherwise), checked
        first against ``size`` when the caller knows it, then as the blob grows."""
        return BlobWriter(
            self, parse_digest(expected) if expected else None, keep_free=keep_free, size=size
        )

    def write_bytes(self, data: bytes) -> str:
        digest, _ = self.write_stream([data])
        return digest

    def import_file(self, source: Path, expected: str | None = None) -> tuple[str, int]:
        """Copy a local file into the store, hashing while copying."""
        with open(source, "rb") as fh:
            return self.write_stream(iter(lambda: fh.read(CHUNK), b""), expected)

    def commit_partial(self, digest: str) -> None:
        """Promote a fully downloaded and verified ``-partial`` file to the blob name."""
        self._commit(self.partial_path(digest), parse_digest(digest))

    def _commit(self, tmp: Path, digest: str) -> None:
        final = self.path(digest)
        if final.exists():
            # Same content already stored (content-addressed): keep the old file
            # and drop the new copy (a promoted ``-partial`` must not linger).
            try:
                os.utime(final)
            except FileNotFoundError:
                pass  # a delete removed it since: ours takes its place below
            else:
                tmp.unlink(missing_ok=True)
                return
        os.replace(tmp, final)
        fsync_dir(self.root)

    def remove(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def digests(self) -> Iterator[str]:
        """Digests of the complete blobs present."""
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            name = entry.name
            if name.startswith("sha256-") and len(name) == 71 and entry.is_file():
                try:
                    yield parse_digest(name)
                except Exception:
                    continue

    def prune(self, referenced: set[str], *, grace_seconds: float = 0.0) -> list[str]:
        """Remove blobs nobody references (older than ``grace_seconds``) and stale temp files."""
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        now = time.time()
        for entry in self.root.iterdir():
            name = entry.name
            try:
                age = now - entry.stat().st_mtime
            except FileNotFoundError:
                continue
            if name.startswith(TMP_PREFIX):
                if stale_tmp(entry, now):
                    entry.unlink(missing_ok=True)
                continue
            if name.endswith("-partial") or "-partial" in name:
                continue
            try:
                digest = parse_digest(name)
            except Exception:
                continue
            if digest not in referenced and age >= grace_seconds:
                entry.unlink(missing_ok=True)
                removed.append(digest)
        return removed

    def remove_stale_tmp(self) -> None:
        if self.root.is_dir():
            now = time.time()
            for entry in self.root.iterdir():
                if entry.name.startswith(TMP_PREFIX) and stale_tmp(entry, now):
                    entry.unlink(missing_ok=True)

    def partials(self) -> list[Path]:
        """The resumable partial downloads (``sha256-<hex>-partial``) present."""
        if not self.root.is_dir():
            return []
        return sorted(
            entry
            for entry in self.root.iterdir()
            if entry.name.startswith("sha256-")
            and entry.name.endswith("-partial")
            and entry.is_file()
        )


class BlobWriter:
    """One blob in the making: a temp file hashed as it grows; nothing visible until
    ``commit`` verifies the digest.  Each method is short blocking work (one chunk)."""

    def __init__(
        self, blobs: BlobStore, expected: str | None, *, keep_free: int = 0, size: int | None = None
    ) -> None:
        self.blobs = blobs
        self.expected = expected
        self.size = 0
        self.keep_free = keep_free
        self.declared = size
        self._checked = 0  # self.size at the last look at the free space
        self._fh: BinaryIO | None = None
        blobs.root.mkdir(parents=True, exist_ok=True)
        check_room(blobs.root, size or 0, keep_free)  # before any byte is accepted
        self.tmp = blobs._tmp()
        self._hash = hashlib.sha256()
        self._fh = open(self.tmp, "wb")

    def write(self, chunk: bytes) -> None:
        assert self._fh is not None, "write after commit/abort"
        if self.keep_free and self.size + len(chunk) - self._checked >= ROOM_CHECK_BYTES:
            self._fh.flush()  # what is written counts as used, not as still to come
            # What is still to come: the rest of a declared size (at least this chunk).
            coming = max(len(chunk), (self.declared or 0) - self.size)
            check_room(self.blobs.root, coming, self.keep_free, stored=self.size)
            self._checked = self.size
        with disk_full_is_no_space():
            self._fh.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)

    def commit(self) -> str:
        """Verify and publish the blob; on a mismatch nothing is left behind."""
        assert self._fh is not None, "commit after commit/abort"
        try:
            with disk_full_is_no_space():
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._close()
            got = f"sha256:{self._hash.hexdigest()}"
            if self.expected is not None and got != self.expected:
                raise DigestMismatch(f'digest mismatch, expected "{self.expected}", got "{got}"')
            self.blobs._commit(self.tmp, got)
            return got
        finally:
            self.abort()

    def abort(self) -> None:
        """Drop the temp file (harmless after ``commit``)."""
        self._close()
        self.tmp.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
