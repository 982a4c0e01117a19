"""Blobs: content addressing, atomic writes, digest mismatch leaves nothing behind, prune."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localllm.errors import BlobNotFound, DigestMismatch, InvalidDigest
from localllm.store.blobs import ROOM_CHECK_BYTES, BlobStore
from localllm.store.diskspace import NoSpace


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _names(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()} if root.exists() else set()


def test_write_and_read(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    digest = blobs.write_bytes(b"hello")
    assert digest == _digest(b"hello")
    assert blobs.exists(digest) and blobs.size(digest) == 5
    assert blobs.read_bytes(digest) == b"hello"
    assert _names(blobs.root) == {"sha256-" + digest[7:]}
    assert list(blobs.digests()) == [digest]


def test_mismatch_leaves_nothing(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    with pytest.raises(DigestMismatch, match="digest mismatch"):
        blobs.write_stream([b"abc"], expected=_digest(b"abd"))
    assert _names(blobs.root) == set()


def test_failed_stream_leaves_nothing(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")

    def broken() -> Iterator[bytes]:
        yield b"x" * 100
        raise OSError("disk went away")

    with pytest.raises(OSError):
        blobs.write_stream(broken())
    assert _names(blobs.root) == set()


def test_rewrite_same_content_keeps_one_file(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    d1 = blobs.write_bytes(b"same")
    d2, size = blobs.import_file(_write(tmp_path / "f", b"same"), expected=d1)
    assert d1 == d2 and size == 4
    assert _names(blobs.root) == {"sha256-" + d1[7:]}


def test_commit_partial_over_existing_blob_drops_partial(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    digest = blobs.write_bytes(b"data")
    blobs.partial_path(digest).write_bytes(b"data")
    blobs.commit_partial(digest)
    assert _names(blobs.root) == {"sha256-" + digest[7:]}


def test_missing_and_invalid(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    with pytest.raises(BlobNotFound):
        blobs.open(_digest(b"nope"))
    with pytest.raises(BlobNotFound):
        blobs.size(_digest(b"nope"))
    for bad in ["../../etc/passwd", "sha256:xyz", "sha256-" + "0" * 63 + "/"]:
        with pytest.raises(InvalidDigest):
            blobs.path(bad)


def test_prune_spares_referenced_young_and_partials(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    keep = blobs.write_bytes(b"keep")
    old = blobs.write_bytes(b"old")
    young = blobs.write_bytes(b"young")
    blobs.partial_path(_digest(b"p")).write_bytes(b"p")
    stale_tmp = blobs.root / ".tmp-deadbeef"
    stale_tmp.write_bytes(b"t")
    past = time.time() - 7200
    for d in (keep, old):
        os.utime(blobs.path(d), (past, past))
    os.utime(stale_tmp, (past, past))
    removed = blobs.prune({keep}, grace_seconds=3600)
    assert removed == [old]
    assert blobs.exists(keep) and blobs.exists(young) and not blobs.exists(old)
    assert blobs.partial_path(_digest(b"p")).exists() and not stale_tmp.exists()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_partials_open_files_and_free_space(tmp_path: Path) -> None:
    from localllm.store.diskspace import free_space
    from localllm.store.tempfiles import open_by_live_process

    blobs = BlobStore(tmp_path / "blobs")
    assert blobs.partials() == []
    part = blobs.partial_path("sha256:" + "ab" * 32)
    part.parent.mkdir()
    part.write_bytes(b"half")
    (blobs.root / ".tmp-1-x").write_bytes(b"t")
    blobs.write_bytes(b"whole")
    assert blobs.partials() == [part]
    assert open_by_live_process([part]) == set()
    with open(part, "rb"):
        assert open_by_live_process([part, tmp_path / "gone"]) == {part}
    where, free = free_space(tmp_path / "not" / "yet")
    assert where == tmp_path and free > 0 and not (tmp_path / "not").exists()


# -- the free space a writer must keep ---------------------------------------------------


def test_a_writer_keeps_the_disk_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import localllm.store.diskspace as blobs_module

    root = tmp_path / "blobs"
    disk = 20 << 20

    def free_space(path: Path) -> tuple[Path, int]:
        return path, disk - sum(f.stat().st_size for f in root.iterdir())

    monkeypatch.setattr(blobs_module, "free_space", free_space)
    blobs = BlobStore(root)
    # Declared too large: refused before a temp file exists.
    with pytest.raises(
        NoSpace,
        match=r"storing 13 MB would leave 8.4 MB free .* "
        r"LOCALLLM_MIN_FREE_DISK \(10 MB\)",
    ) as info:
        blobs.writer(keep_free=10 << 20, size=12 << 20)
    assert info.value.status == 507 and _names(root) == set()
    # Undeclared (or under-declared): refused as it grows, within one look.
    w = blobs.writer(keep_free=10 << 20, size=1)
    with pytest.raises(NoSpace):
        for _ in range(64):
            w.write(b"z" * (1 << 20))
    assert 10 << 20 <= w.size <= (10 << 20) + ROOM_CHECK_BYTES
    w.abort()
    assert _names(root) == set()
    # keep_free 0: no checks at all (the CLI's own imports, tests).
    w = blobs.writer(size=100 << 20)
    w.write(b"ok")
    assert w.commit() == _digest(b"ok")


def test_a_full_disk_is_no_space_not_an_internal_error(tmp_path: Path) -> None:
    import errno

    blobs = BlobStore(tmp_path / "blobs")
    w = blobs.writer()

    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device", str(w.tmp))

        def close(self) -> None:
            pass

    real = w._fh
    w._fh = Full()  # type: ignore[assignment]
    with pytest.raises(NoSpace, match="disk is full") as info:
        w.write(b"x")
    assert str(tmp_path) not in info.value.message
    assert real is not None
    real.close()
    w.abort()
    assert _names(blobs.root) == set()


def test_storing_a_blob_that_a_delete_removes_meanwhile_keeps_the_new_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(tmp_path / "blobs")
    digest = store.write_bytes(b"same bytes")
    real_utime = os.utime

    def deleted_first(path: Any, *args: Any, **kw: Any) -> None:
        Path(path).unlink()  # a delete's collection, between exists() and utime()
        real_utime(path, *args, **kw)

    monkeypatch.setattr(os, "utime", deleted_first)
    assert store.write_bytes(b"same bytes") == digest
    assert store.read_bytes(digest) == b"same bytes"
