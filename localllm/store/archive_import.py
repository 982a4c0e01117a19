"""``localllm import FILE``: an archive's models checked, copied into the store, listed last.

The archive (``store/archive.py``) is read once, in order, from a file or a pipe.
Its table comes first; each member must then be the next one the table lists, a
regular file (no links, devices, fifos or sparse files) of the listed size, so
a name outside the table, a member given twice, out of place or of another size
is refused.  Each manifest's sha256 is checked as it is read, and every blob it
names must be in the archive with the size it says.  Only then is anything
copied: each blob is hashed as it is written and takes its name only when the
digest matches.  Manifests are written after the last blob is verified, so a
model is listed whole or not at all, and a refused archive lists nothing (blobs
it brought are removed again).

Resuming: a blob the store has already (right size) is skipped, not copied
again.  A copy cut short keeps its verified blobs and the blob in progress as
``blobs/sha256-<hex>-partial``; the next import of the archive continues that
partial where it stopped when the archive is a file (seekable), or restarts it
from a pipe (``store/archive_blob.py``).  If a continued partial turns out not to
match, it is copied again from the start.  ``localllm prune --partials`` removes
partials nobody finishes.

A model the store already has under the same name is unchanged when the manifest
is the same, and refuses the whole import when it differs, before any blob is
copied.  ``force`` replaces it, and copies every blob of the chosen models again
even when the store has it (verified, then put in place of the old file): so an
archive mends a model whose blobs ``verify`` found damaged.  The daemon needs no
telling: it reads the manifests from disk on every request, so the models are
listed once written.
"""

from __future__ import annotations

import os
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from localllm import config
from localllm.store.archive import (
    MAX_TABLE_BYTES,
    TABLE,
    ArchiveError,
    Member,
    check_manifest,
    check_member,
    is_plain,
    read_table,
)
from localllm.store.archive_blob import copy_blob
from localllm.store.diskspace import check_room
from localllm.store.local import Store
from localllm.store.manifests import Manifest
from localllm.store.names import ModelName
from localllm.store.progress import Progress


class Truncated(ArchiveError):
    """The archive ends early: what was verified is kept for the next run."""


@dataclass
class ModelStatus:
    name: str
    status: str  # imported | replaced | unchanged | would import | would replace
    size: int = 0


@dataclass
class ArchiveReport:
    dry_run: bool = False
    models: list[ModelStatus] = field(default_factory=list)
    copied: int = 0  # blobs written by this run
    copied_bytes: int = 0
    present: int = 0  # blobs the store had already
    resumed: int = 0  # blobs continued from an earlier, interrupted import
    resumed_bytes: int = 0  # bytes of those that were not read again
    seconds: float = 0.0


def import_archive(
    store: Store,
    source: BinaryIO,
    *,
    seekable: bool,
    names: Iterable[ModelName] = (),
    force: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> ArchiveReport:
    """Import the archive read from ``source`` (see the module docstring); ``names``:
    only these models; ``seekable``: ``source`` is a file (partials continue)."""
    started = time.monotonic()
    run = _Import(store, seekable, list(names), force, dry_run, progress)
    try:
        try:
            with tarfile.open(fileobj=source, mode="r:" if seekable else "r|") as tar:
                run.read(tar)
        except tarfile.ReadError as exc:
            if run.table is None:
                raise ArchiveError(
                    f"not a localllm archive, or cut short before its table ({exc})"
                ) from None
            if "unexpected end of data" in str(exc):
                raise run.truncated() from None
            raise ArchiveError(f"refusing the archive: it is damaged ({exc})") from None
        except (tarfile.TarError, EOFError) as exc:
            raise ArchiveError(f"refusing the archive: it is damaged ({exc})") from None
        run.commit()
    except Truncated:
        raise  # what was verified stays, for the next run
    except ArchiveError:
        run.drop_brought()  # a refused archive leaves nothing behind
        raise
    finally:
        run.report.seconds = time.monotonic() - started
    return run.report


class _Import:
    def __init__(
        self,
        store: Store,
        seekable: bool,
        names: list[ModelName],
        force: bool,
        dry_run: bool,
        progress: Progress | None,
    ) -> None:
        self.store, self.seekable, self.names = store, seekable, names
        self.force, self.progress = force, progress
        self.report = ArchiveReport(dry_run=dry_run)
        self.table: list[Member] | None = None
        self.listed: set[str] = set()  # the table's names
        self.held: dict[str, Member] = {}  # the table's blobs by digest
        self.seen: set[str] = set()
        self.index = 0  # the table entry the next member must be (and how many are done)
        self.planned = False
        self.manifests: dict[str, tuple[ModelName, Manifest, Member]] = {}
        self.wanted: set[str] = set()  # blob digests the chosen models need
        self.pending: list[tuple[ModelName, Manifest, Member]] = []  # to write at the end
        self.brought: set[str] = set()

    # -- reading ------------------------------------------------------------------------
    def read(self, tar: tarfile.TarFile) -> None:
        first = tar.next()
        if first is None or first.name != TABLE or not is_plain(first):
            raise ArchiveError(f"not a localllm archive: it does not start with {TABLE}")
        if first.size > MAX_TABLE_BYTES:
            raise ArchiveError(f"refusing the archive: its {TABLE} is too large")
        table = read_table(_read_all(tar, first))
        self.table, self.held = table.files, table.blobs()
        self.listed = {m.name for m in self.table}
        if [m.name for m in self.table] != sorted(
            (m.name for m in self.table), key=lambda n: not n.startswith("manifests/")
        ):
            raise ArchiveError("refusing the archive: its table lists blobs before manifests")
        if not any(m.name.startswith("manifests/") for m in self.table):
            raise ArchiveError("the archive holds no models")
        for member in tar:
            if member is first:  # iterating starts again from the first member
                continue
            expected = self._check(member)
            if expected.name.startswith("manifests/"):
                self._manifest(tar, member, expected)
            else:
                if not self.planned:
                    self._plan()
                if self.report.dry_run:
                    return
                self._blob(tar, member, expected)
            self.index += 1
        if self.index < len(self.table):
            raise self.truncated()
        if not self.planned:
            self._plan()

    def truncated(self) -> Truncated:
        assert self.table is not None
        left = len(self.table) - self.index
        return Truncated(
            f"the archive is cut short: {left} of its {len(self.table)} files are missing "
            "or incomplete. Nothing was listed; the blobs verified so far are kept, so "
            "importing the whole archive again finishes the job without copying them twice"
        )

    def _check(self, m: tarfile.TarInfo) -> Member:
        """The table entry member ``m`` must be, or ``ArchiveError`` saying why it is refused."""
        assert self.table is not None
        check_member(m)
        name = m.name
        if name in self.seen or name == TABLE:
            raise ArchiveError(f"refusing the archive: {name!r} is in it twice")
        if self.index >= len(self.table) or name not in self.listed:
            raise ArchiveError(f"refusing the archive: {name!r} is not in its table")
        expected = self.table[self.index]
        if name != expected.name:
            raise ArchiveError(
                f"refusing the archive: {name!r} is out of place (its table puts "
                f"{expected.name!r} here)"
            )
        if m.size != expected.size:
            raise ArchiveError(
                f"refusing the archive: {name!r} is {m.size} bytes, its table says {expected.size}"
            )
        self.seen.add(name)
        return expected

    def _manifest(self, tar: tarfile.TarFile, m: tarfile.TarInfo, expected: Member) -> None:
        name, manifest = check_manifest(expected, _read_all(tar, m), self.held)
        key = "/".join(name.key())
        if key in self.manifests:
            raise ArchiveError(f"refusing the archive: it holds {name.display} twice")
        self.manifests[key] = (name, manifest, expected)

    def _plan(self) -> None:
        """Once every manifest is read, before any blob: which models, which blobs, room."""
        assert self.table is not None
        self.planned = True
        chosen = list(self.manifests.values())
        if self.names:
            keys = {"/".join(n.key()) for n in self.names}
            absent = [n.display for n in self.names if "/".join(n.key()) not in self.manifests]
            if absent:
                held = ", ".join(n.display for n, _, _ in chosen)
                raise ArchiveError(f"the archive has no model {absent[0]}; it holds {held}")
            chosen = [c for k, c in self.manifests.items() if k in keys]
        used: set[str] = set()
        for _, manifest, _ in self.manifests.values():
            used |= manifest.digests()
        stray = [m.name for digest, m in self.held.items() if digest not in used]
        if stray:
            raise ArchiveError(f"refusing the archive: no manifest uses {stray[0]!r}")
        conflicts: list[str] = []
        dry = self.report.dry_run
        for name, manifest, member in chosen:
            status = "would import" if dry else "imported"
            if self.store.manifests.exists(name):
                if self.force:
                    status = "would replace" if dry else "replaced"
                elif _same(self.store, name, manifest):
                    status = "unchanged"
                else:
                    conflicts.append(name.display)
            self.report.models.append(ModelStatus(name.display, status, manifest.total_size))
            if status != "unchanged":
                self.pending.append((name, manifest, member))
                self.wanted |= manifest.digests()
        if conflicts:
            raise ArchiveError(
                f"localllm already has a different model named {conflicts[0]}"
                + (f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else "")
                + "; --force replaces it, -m NAME imports only the models named. "
                "Nothing was imported"
            )
        coming = sum(self.held[d].size for d in self.wanted if not self.store.blobs.exists(d))
        if not dry:
            check_room(self.store.blobs.root, coming, config.MIN_FREE_DISK.get())

    def _blob(self, tar: tarfile.TarFile, m: tarfile.TarInfo, expected: Member) -> None:
        digest = f"sha256:{expected.sha256}"
        if digest not in self.wanted:
            return  # a model not chosen: tarfile skips its bytes
        blobs = self.store.blobs
        try:
            if blobs.path(digest).stat().st_size == expected.size and not self.force:
                self.report.present += 1
                return
            if not self.force:
                blobs.remove(digest)  # the wrong size for its digest: damaged, replaced here
        except FileNotFoundError:
            pass
        fh = tar.extractfile(m)
        assert fh is not None
        self._copy(fh, digest, expected.size)

    def _copy(self, src: IO[bytes], digest: str, size: int) -> None:
        have = copy_blob(
            self.store,
            src,
            digest,
            size,
            resume=self.seekable,
            replace=self.force,
            progress=self.progress,
            cut_short=self.truncated,
        )
        self.brought.add(digest)
        self.report.copied += 1
        self.report.copied_bytes += size - have
        if have:
            self.report.resumed += 1
            self.report.resumed_bytes += have

    # -- finishing -----------------------------------------------------------------------
    def commit(self) -> None:
        """Write the manifests, now that every blob is verified (nothing in a dry run)."""
        if self.report.dry_run:
            return
        with self.store.lock:
            for name, manifest, member in self.pending:
                self.store.commit(name, manifest)
                path = self.store.manifests.locate(name)
                if path is not None and member.mtime_ns is not None:
                    os.utime(path, ns=(member.mtime_ns, member.mtime_ns))

    def drop_brought(self) -> None:
        """Remove what this run copied for a refused archive (no manifest uses it)."""
        if not self.brought:
            return
        with self.store.lock:
            for digest in self.brought - self.store.manifests.referenced():
                self.store.blobs.remove(digest)


def _read_all(tar: tarfile.TarFile, m: tarfile.TarInfo) -> bytes:
    fh = tar.extractfile(m)
    data = fh.read(m.size) if fh is not None else b""
    if len(data) != m.size:
        raise tarfile.ReadError("unexpected end of data")
    return data


def _same(store: Store, name: ModelName, manifest: Manifest) -> bool:
    try:
        return store.get(name).manifest == manifest
    except Exception:
        return False  # an unreadable manifest differs from anything
