"""One blob of an archive into the store, for ``store/archive_import.py``: continued from
an earlier run's partial where the archive can seek, hashed as it is written, and
named only when its bytes match the digest.

The bytes go to ``blobs/sha256-<hex>-partial``, the name a pull's download uses too
(the same bytes of the same blob, so either may finish the other's), and stay there
when the archive ends early.  The next run hashes what the partial holds, seeks the
archive past it and appends the rest; if the whole then does not match, the partial
was at fault or the archive is, so the blob is copied once more from its start, and
only a mismatch then refuses the archive.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from localllm.store.archive import ArchiveError
from localllm.store.blobs import CHUNK
from localllm.store.local import Store
from localllm.store.progress import BlobProgress, Progress


def copy_blob(
    store: Store,
    src: IO[bytes],
    digest: str,
    size: int,
    *,
    resume: bool,
    replace: bool,
    progress: Progress | None,
    cut_short: Callable[[], Exception],
) -> int:
    """Copy blob ``digest`` (``size`` bytes) from ``src`` (a member of the archive) into
    ``store``; returns how many bytes an earlier run's partial held (not read again).

    ``resume``: ``src`` can seek, so a partial is continued; ``replace``: the stored
    file of that name, if any, gives way to the verified copy; ``cut_short()``: the
    error when ``src`` ends early.
    """
    blobs = store.blobs
    blobs.root.mkdir(parents=True, exist_ok=True)
    partial = blobs.partial_path(digest)
    h = hashlib.sha256()
    have = _prefix(partial, size, h) if resume else 0
    if have:
        src.seek(have)
    report = BlobProgress(progress, f"copying {digest[7:19]}", digest, size, shown=-1)
    _append(src, partial, have, size, h, report, cut_short)
    got = f"sha256:{h.hexdigest()}"
    if got != digest:
        partial.unlink(missing_ok=True)
        if have:  # the earlier run's partial was bad, not necessarily the archive
            src.seek(0)
            copy_blob(
                store,
                src,
                digest,
                size,
                resume=False,
                replace=replace,
                progress=progress,
                cut_short=cut_short,
            )
            return 0
        raise ArchiveError(
            f"refusing the archive: blob {digest} does not match its digest "
            f"(its bytes hash to {got})"
        )
    with store.lock:
        if replace:  # the stored file, damaged or not, gives way to the verified copy
            blobs.remove(digest)
        blobs.commit_partial(digest)
    return have


def _append(
    src: IO[bytes],
    partial: Path,
    have: int,
    size: int,
    h: hashlib._Hash,
    report: BlobProgress,
    cut_short: Callable[[], Exception],
) -> None:
    """Write ``src``'s bytes from ``have`` to ``size`` into ``partial`` after its first
    ``have`` (anything beyond them cut off), hashing them into ``h``; fsynced."""
    fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
    with os.fdopen(fd, "r+b") as out:
        out.seek(have)
        out.truncate()
        done = have
        while done < size:
            chunk = src.read(min(CHUNK, size - done))
            if not chunk:
                raise cut_short()
            out.write(chunk)
            h.update(chunk)
            done += len(chunk)
            report(done)
        out.flush()
        os.fsync(out.fileno())


def _prefix(partial: Path, size: int, h: hashlib._Hash) -> int:
    """Hash the bytes an earlier run left in ``partial`` into ``h``; how many there are
    (0, and ``h`` untouched, when there is none or it is longer than the blob)."""
    try:
        have = partial.stat().st_size
    except FileNotFoundError:
        return 0
    if have > size:
        return 0
    left = have
    with open(partial, "rb") as fh:
        while left and (chunk := fh.read(min(CHUNK, left))):
            h.update(chunk)
            left -= len(chunk)
    return have - left
