"""``localllm export``: models written to one archive (the format is ``store/archive.py``'s).

Every blob is hashed as it is written, so an archive that ends well holds what its
table says; ``write_file`` makes a file appear under its name only once complete.
It runs without the daemon: it only reads the store's files.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

from localllm.store.archive import TABLE, ArchiveError, Member, Table, manifest_member
from localllm.store.local import Store
from localllm.store.manifests import MAX_MANIFEST_BYTES, Entry, Manifest
from localllm.store.names import ModelName, parse_name
from localllm.store.progress import BlobProgress, Progress
from localllm.store.tempfiles import atomic_write


@dataclass
class ExportReport:
    models: list[str] = field(default_factory=list)
    blobs: int = 0
    bytes: int = 0
    seconds: float = 0.0


def export_models(
    store: Store, names: Iterable[ModelName], out: BinaryIO, progress: Progress | None = None
) -> ExportReport:
    """Write the archive of ``names`` to ``out`` (a file or a pipe, written in order).

    Every blob is hashed as it is written: a damaged one stops the export with an
    ``ArchiveError`` (the caller removes what it wrote), so an archive that ends
    well holds what its table says.  Runs without the daemon; it only reads files.
    """
    started = time.monotonic()
    report = ExportReport()
    table, sources = _plan(store, names, report)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        data = table.to_bytes()
        _add_bytes(tar, TABLE, data, time.time())
        for member in table.files:
            source = sources[member.name]
            if isinstance(source, bytes):
                _add_bytes(tar, member.name, source, member.mtime)
                continue
            try:
                fh = open(source, "rb")  # closed just below
            except FileNotFoundError:
                raise ArchiveError(
                    f"blob sha256:{member.sha256} was removed from the store during the export "
                    "(a model deleted meanwhile?)"
                ) from None
            with fh:
                _add_blob(tar, member, fh, progress)
            report.blobs += 1
            report.bytes += member.size
    report.seconds = time.monotonic() - started
    return report


def _plan(
    store: Store, names: Iterable[ModelName], report: ExportReport
) -> tuple[Table, dict[str, bytes | str]]:
    """The table and, per member, its bytes (a manifest) or its path (a blob)."""
    manifests: list[Member] = []
    blobs: dict[str, Member] = {}
    sources: dict[str, bytes | str] = {}
    for name in names:
        entry = store.get(name)
        path = store.manifests.locate(name)
        if path is None:
            raise ArchiveError(f"model '{name.display}' not found")
        # The name as stored (its case), and the manifest's own bytes: the same digest there.
        stored = parse_name("{}/{}/{}:{}".format(*path.relative_to(store.manifests.root).parts))
        member = manifest_member(stored)
        if member in sources:
            continue
        data = path.read_bytes()[: MAX_MANIFEST_BYTES + 1]
        manifest = Manifest.from_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        manifests.append(Member(member, len(data), sha, path.stat().st_mtime_ns))
        sources[member] = data
        report.models.append(stored.display)
        _plan_blobs(store, entry, manifest, blobs, sources)
    return Table([*manifests, *blobs.values()]), sources


def _plan_blobs(
    store: Store,
    entry: Entry,
    manifest: Manifest,
    blobs: dict[str, Member],
    sources: dict[str, bytes | str],
) -> None:
    for layer in [manifest.config, *manifest.layers]:
        if layer.digest in blobs:
            continue
        path = store.blobs.path(layer.digest)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise ArchiveError(
                f"{entry.name.display}: blob {layer.digest} is missing from the store; "
                f"`localllm verify --repair {entry.name.display}` can pull it again"
            ) from None
        if st.st_size != layer.size:
            raise ArchiveError(
                f"{entry.name.display}: blob {layer.digest} is {st.st_size} bytes, its manifest "
                f"says {layer.size}: it is damaged (`localllm verify {entry.name.display}`)"
            )
        member = Member(f"blobs/{path.name}", layer.size, layer.digest[7:])
        blobs[layer.digest] = member
        sources[member.name] = str(path)


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    info.uname = info.gname = ""
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    tar.addfile(_info(name, len(data), mtime), io.BytesIO(data))


class _Hashing:
    """A blob file read by tarfile, hashed (and its progress reported) as it goes."""

    def __init__(self, fh: IO[bytes], member: Member, progress: Progress | None) -> None:
        self.fh, self.member, self.progress = fh, member, progress
        self.h = hashlib.sha256()
        self.done = 0
        digest = f"sha256:{member.sha256}"
        self.report = BlobProgress(progress, f"exporting {member.sha256[:12]}", digest, member.size)

    def read(self, n: int = -1) -> bytes:
        chunk = self.fh.read(n)
        self.h.update(chunk)
        self.done += len(chunk)
        self.report(self.done)
        return chunk


def _add_blob(
    tar: tarfile.TarFile, member: Member, fh: IO[bytes], progress: Progress | None
) -> None:
    reader = _Hashing(fh, member, progress)
    try:
        tar.addfile(_info(member.name, member.size, member.mtime), reader)
    except OSError as exc:  # tarfile's "unexpected end of data": the file shrank
        raise ArchiveError(f"blob sha256:{member.sha256} could not be read whole: {exc}") from None
    if reader.h.hexdigest() != member.sha256:
        raise ArchiveError(
            f"blob sha256:{member.sha256} in the store does not match its digest: it is "
            "damaged; nothing usable was exported (`localllm verify --repair` fixes the store)"
        )


def write_file(path: str, write: Callable[[BinaryIO], ExportReport]) -> ExportReport:
    """Run ``write`` into a temp file beside ``path``, renamed to ``path`` when it ends
    well: an archive under its name is always whole."""
    return atomic_write(Path(path), write)
