"""``localllm import ollama``: an Ollama store's models brought into ours, nothing downloaded.

Both stores are content-addressed with the same digests, so a model comes over as
its blobs plus its manifest.  Each blob the store lacks is **hard-linked** into our
``blobs/`` when both are on one filesystem (no bytes copied, and the two stores share
the disk space), else **copied**; either way its bytes are hashed and must match the
digest before it takes its name (a link goes to a temp name first), as for every
blob we store.  The manifest is written last, so a model appears whole or not at all.

The Ollama store is only read (``store/ollama_store.py``).  A link shares the file,
never its name: we replace and remove our blobs by renaming and unlinking, never by
writing into them, so nothing we do later reaches Ollama's copy either.  The other
way round, a link is only as safe as the file's owner and mode: a blob that another
account owns, or that its group or everyone may write, could be rewritten after it
was verified, so it is copied instead (judged on the linked file itself, after the
link, so a swap between the check and the link changes nothing).

The config blob is Ollama's with an ``origin`` added (``with_origin``): the name that
pulls the model from Ollama's registry, so a later ``localllm pull`` of it updates it
rather than refusing to replace a model made here.

A model already here under the same name is left alone: unchanged when it has the
same manifest, refused when it differs (``force`` replaces it).  A broken entry is
reported and skipped; blobs this run brought in for models that then failed are
removed again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from localllm import config
from localllm.errors import DigestMismatch, InvalidRequest, LocalLLMError
from localllm.store.blobs import CHUNK
from localllm.store.diskspace import free_space
from localllm.store.local import Store
from localllm.store.manifests import CONFIG_MEDIA_TYPE, Layer, Manifest, Media
from localllm.store.names import DEFAULT_HOST, ModelName
from localllm.store.ollama_store import Blob, Broken, Found, OllamaStore, find_store, open_regular
from localllm.store.progress import STEP as PROGRESS_STEP, Progress
from localllm.store.tempfiles import fsync_dir, tmp_name

Check = Callable[[Found], list[str]]  # warnings about a model's template, parameters...
# link() errors that mean "no hard link here" (another filesystem, a file of another
# user under fs.protected_hardlinks, a filesystem without links, a full link count).
_NO_LINK = {
    errno.EXDEV,
    errno.EPERM,
    errno.EACCES,
    errno.EMLINK,
    errno.ENOTSUP,
    errno.EOPNOTSUPP,
    errno.ENOSYS,
}


@dataclass
class ModelResult:
    name: str
    # imported | would import (dry run) | unchanged | skipped (nothing to import) | failed
    status: str
    reason: str = ""
    size: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    source: Path
    dry_run: bool = False
    models: list[ModelResult] = field(default_factory=list)
    linked: int = 0  # blobs hard-linked (or, in a dry run, that would be)
    linked_bytes: int = 0
    copied: int = 0
    copied_bytes: int = 0
    present: int = 0  # blobs the store had already
    link_note: str = ""  # why blobs were copied rather than linked
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for m in self.models if m.status == status)

    @property
    def failed(self) -> bool:
        return self.count("failed") > 0


def import_ollama(
    store: Store,
    source: Path | None,
    *,
    names: Iterable[ModelName] = (),
    copy: bool = False,
    dry_run: bool = False,
    force: bool = False,
    progress: Progress | None = None,
    check: Check | None = None,
) -> ImportReport:
    """Import every model of the Ollama store at ``source`` (default: Ollama's own
    folder, ``find_store``), or only ``names``.  ``copy``: never hard-link; ``dry_run``:
    report what would happen, change nothing; ``force``: replace a different model of
    the same name; ``check``: warnings about a model's contents (models/ollama.py's)."""
    started = time.monotonic()
    root = find_store(source)
    _refuse_own_store(root, store.root)
    found = OllamaStore(root).scan()
    report = ImportReport(root, dry_run=dry_run)
    wanted = list(names)
    if wanted:
        keys = {n.key() for n in wanted}
        found = [f for f in found if f.name is not None and f.name.key() in keys]
        have = {f.name.key() for f in found if f.name is not None}
        report.models += [
            ModelResult(n.display, "failed", "not in the Ollama store")
            for n in wanted
            if n.key() not in have
        ]
    run = _Run(store, report, copy=copy, dry_run=dry_run, progress=progress)
    try:
        for entry in found:
            report.models.append(run.model(entry, force=force, check=check))
    finally:
        run.drop_orphans()
        report.seconds = time.monotonic() - started
    return report


def with_origin(entry: Found) -> tuple[bytes, Manifest]:
    """The config blob (Ollama's, with an ``origin``) and the manifest naming it."""
    assert entry.name is not None and entry.manifest is not None
    name, theirs = entry.name, entry.manifest
    origin: dict[str, Any] = {"source": name.display, "imported": "ollama"}
    if name.host.lower() == DEFAULT_HOST:
        origin.update(source=f"ollama://{name.display}", registry=f"https://{DEFAULT_HOST}")
    model = theirs.first(Media.MODEL)
    if model is not None:
        origin["digest"] = model.digest
    data = json.dumps({**entry.config, "origin": origin}, sort_keys=True).encode()
    config = Layer(CONFIG_MEDIA_TYPE, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))
    return data, Manifest(config, theirs.layers)


def _refuse_own_store(root: Path, ours: Path) -> None:
    try:
        same = ours.exists() and os.path.samefile(root, ours)
    except OSError:
        same = False
    if same:
        raise InvalidRequest(
            f"{root} is localllm's own model store (LOCALLLM_MODELS, or "
            "OLLAMA_MODELS in its place, points there): its models are "
            "listed already, there is nothing to import"
        )


class _Run:
    """One import: the blobs it has handled so far, and the counts for the report."""

    def __init__(
        self,
        store: Store,
        report: ImportReport,
        *,
        copy: bool,
        dry_run: bool,
        progress: Progress | None,
    ) -> None:
        self.store = store
        self.report = report
        self.dry_run = dry_run
        self.progress = progress
        self.no_links = copy
        if copy:
            report.link_note = "--copy"
        self.handled: set[str] = set()
        self.brought: set[str] = set()  # blobs this run added to the store
        self.bad: dict[str, str] = {}  # digest -> why it cannot be used (no second try)
        self._same_device: bool | None = None

    # -- one model -----------------------------------------------------------
    def model(self, entry: Found, *, force: bool, check: Check | None) -> ModelResult:
        label = entry.name.display if entry.name is not None else entry.label
        if entry.problem:
            return ModelResult(label, "failed", entry.problem)
        if entry.remote:
            return ModelResult(
                label,
                "skipped",
                f"a cloud model (it runs on {entry.remote}): nothing of it is stored locally",
            )
        assert entry.name is not None and entry.manifest is not None
        name, theirs = entry.name, entry.manifest
        config, manifest = with_origin(entry)
        result = ModelResult(label, "imported", size=manifest.total_size)
        existing = self._existing(name)
        if existing is not None and existing == manifest:
            result.status = "unchanged"
            return result
        # Imported before origins were recorded: the same model, its config gains one.
        if existing == Manifest(theirs.config, manifest.layers):
            existing = None
        if existing is not None and not force:
            result.status, result.reason = (
                "failed",
                (
                    f"localllm already has a different model named {name.display}; "
                    "--force replaces it"
                ),
            )
            return result
        result.warnings = [*entry.notes, *(check(entry) if check else [])]
        if existing is not None:
            verb = "would replace" if self.dry_run else "replaced"
            result.warnings.append(f"{verb} the model of that name (--force)")
        try:
            used = {layer.digest for layer in manifest.layers}
            for blob in entry.blobs:
                if blob.digest in used:  # Ollama's config is replaced by ours
                    self._blob(blob)
            if self.dry_run:
                result.status = "would import"
            else:
                if not self.store.blobs.exists(manifest.config.digest):
                    self.brought.add(manifest.config.digest)
                self.store.put_bytes(CONFIG_MEDIA_TYPE, config)
                self.store.commit(name, manifest)
        except (Broken, LocalLLMError) as exc:
            result.status, result.reason = "failed", exc.message
        except OSError as exc:
            result.status, result.reason = "failed", f"{exc.strerror or exc}"
        return result

    def _existing(self, name: ModelName) -> Manifest | bool | None:
        if not self.store.manifests.exists(name):
            return None
        try:
            return self.store.get(name).manifest
        except LocalLLMError:
            return False  # an unreadable manifest: differs from anything

    # -- one blob ------------------------------------------------------------
    def _blob(self, blob: Blob) -> None:
        if blob.digest in self.handled:
            return
        if blob.digest in self.bad:
            raise Broken(self.bad[blob.digest])
        try:
            self._bring(blob)
        except Broken as exc:
            self.bad[blob.digest] = exc.message
            raise
        self.handled.add(blob.digest)

    def _bring(self, blob: Blob) -> None:
        if self.store.blobs.exists(blob.digest):
            # Never read, touched nor replaced: it may itself be a link to Ollama's file.
            self.report.present += 1
        elif self.dry_run:
            self._count(blob, linked=self._can_link() and self._linkable(os.stat(blob.path)))
        elif not self.no_links and self._link(blob):
            self._count(blob, linked=True)
        else:
            self._copy(blob)
            self._count(blob, linked=False)

    def _count(self, blob: Blob, *, linked: bool) -> None:
        report = self.report
        if linked:
            report.linked += 1
            report.linked_bytes += blob.size
        else:
            report.copied += 1
            report.copied_bytes += blob.size
        if not self.dry_run:
            self.brought.add(blob.digest)

    def _can_link(self) -> bool:
        """For a dry run: whether both stores are on one filesystem (and links allowed)."""
        if self.no_links:
            return False
        if self._same_device is None:
            probe, _ = free_space(self.store.blobs.root)
            self._same_device = (
                os.stat(probe).st_dev == os.stat(self.report.source / "blobs").st_dev
            )
            if not self._same_device:
                self.report.link_note = "the two stores are on different filesystems"
        return self._same_device

    def _link(self, blob: Blob) -> bool:
        root = self.store.blobs.root
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / tmp_name()
        try:
            os.link(blob.path, tmp)
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            if exc.errno == errno.EXDEV:
                self.no_links = True  # every other blob is on the other filesystem too
                self.report.link_note = "the two stores are on different filesystems"
            elif not self.report.link_note:
                self.report.link_note = f"hard links refused ({exc.strerror})"
            return False
        try:
            with open_regular(tmp) as fh:
                if not self._linkable(os.fstat(fh.fileno())):
                    return False  # the finally removes our name for it: copied instead
                got = self._hash(fh, blob, "verifying")
            if got != blob.digest:
                raise Broken(f"blob {blob.digest} does not match its digest (it hashes to {got})")
            os.replace(tmp, self.store.blobs.path(blob.digest))
            fsync_dir(root)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _linkable(self, st: os.stat_result) -> bool:
        """Whether a file with ``st`` may be shared: nobody but us or root can change it."""
        others = hasattr(os, "geteuid") and st.st_uid not in (os.geteuid(), 0)
        if others or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            self.report.link_note = (
                "blobs that another account owns or may write are copied, not linked"
            )
            return False
        return True

    def _copy(self, blob: Blob) -> None:
        writer = self.store.blobs.writer(
            blob.digest, keep_free=config.MIN_FREE_DISK.get(), size=blob.size
        )
        try:
            with open_regular(blob.path) as fh:
                self._hash(fh, blob, "copying", writer.write)
            writer.commit()  # hashed as written: the digest is checked here
        except DigestMismatch:
            raise Broken(f"blob {blob.digest} does not match its digest") from None
        finally:
            writer.abort()

    def _hash(
        self, fh: BinaryIO, blob: Blob, verb: str, sink: Callable[[bytes], None] | None = None
    ) -> str:
        h = hashlib.sha256()
        done = shown = 0
        status = f"{verb} {blob.digest.removeprefix('sha256:')[:12]}"
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            if sink is not None:
                sink(chunk)
            done += len(chunk)
            if self.progress is not None and done - shown >= PROGRESS_STEP:
                shown = done
                self.progress(
                    {"status": status, "digest": blob.digest, "total": blob.size, "completed": done}
                )
        if self.progress is not None:
            self.progress(
                {"status": status, "digest": blob.digest, "total": blob.size, "completed": done}
            )
        return f"sha256:{h.hexdigest()}"

    def drop_orphans(self) -> None:
        """Remove what this run brought in for models that then failed (no manifest)."""
        if not self.brought:
            return
        with self.store.lock:
            unused = self.brought - self.store.manifests.referenced()
            for digest in unused:
                self.store.blobs.remove(digest)
