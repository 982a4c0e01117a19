"""The model store as one object: blobs + manifests, and the operations that touch both.

``Store`` is what services use: list, read, copy and delete models, store text
layers, and collect garbage.  Pulls (``store/pull.py``) and creates write
through it too.

A pull references its blobs only when it commits its manifest, seconds or hours
after it found or wrote them, and a delete of the same model meanwhile would
collect them from under it (then the pull failed on a file that had just
vanished, or committed a manifest whose blobs were gone).  So a pull ``hold``s
each blob before it looks for it or writes it: garbage collection skips held
blobs, and remembers the ones it skipped; when the last hold on such a blob
ends and still no manifest uses it, it is removed then.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localllm import config, paths
from localllm.errors import ModelNotFound
from localllm.store.blobs import BlobStore
from localllm.store.manifests import CONFIG_MEDIA_TYPE, Entry, Layer, Manifest, ManifestStore, Media
from localllm.store.names import ModelName
from localllm.store.tempfiles import open_by_live_process, pid_alive

# A partial this recently written may belong to a pull of the running daemon that is
# between re-hashing it and reopening it to append (it holds no descriptor then).
PARTIAL_QUIET_S = 60.0


@dataclass
class PartialsReport:
    """What ``Store.prune_partials`` removed (or would remove) and what it kept, and why."""

    removed: list[tuple[Path, int]] = field(default_factory=list)
    kept: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return sum(size for _, size in self.removed)


class Hold:
    """The blobs one operation in flight (a pull) will reference when it commits: no
    delete, replacement or prune removes them until ``release`` (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.digests: set[str] = set()

    def add(self, digest: str) -> None:
        with self.store.lock:
            if digest not in self.digests:
                self.digests.add(digest)
                self.store._held[digest] += 1

    def release(self) -> None:
        """End the hold; a blob garbage collection skipped meanwhile goes now if unused."""
        store = self.store
        with store.lock:
            gone = []
            for digest in self.digests:
                store._held[digest] -= 1
                if store._held[digest] <= 0:
                    del store._held[digest]
                    if digest in store._doomed:
                        store._doomed.discard(digest)
                        gone.append(digest)
            self.digests.clear()
            if gone:
                in_use = store.manifests.referenced()
                for digest in gone:
                    if digest not in in_use:
                        store.blobs.remove(digest)


class Store:
    """A model store rooted at ``root`` (default: ``paths.models()``)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else paths.models()
        self.blobs = BlobStore(self.root / "blobs")
        self.manifests = ManifestStore(self.root / "manifests")
        # Serialises manifest replacement + GC so a prune never races a commit.
        self.lock = threading.RLock()
        self._held: Counter[str] = Counter()  # digest -> holds on it (see ``Hold``)
        self._doomed: set[str] = set()  # held blobs garbage collection skipped

    def hold(self) -> Hold:
        """A new, empty ``Hold``; the caller must ``release`` it (``try``/``finally``)."""
        return Hold(self)

    # -- reading -------------------------------------------------------------
    def get(self, name: ModelName) -> Entry:
        try:
            return self.manifests.read(name)
        except FileNotFoundError:
            # Deleted between being found and being read (deletes do not wait for readers).
            raise ModelNotFound(f"model '{name.display}' not found") from None

    def list(self) -> list[Entry]:
        return sorted(self.manifests.entries(), key=lambda e: e.modified, reverse=True)

    def model_path(self, entry: Entry) -> Path:
        """Path of the (first) GGUF model blob of a manifest."""
        layer = entry.manifest.first(Media.MODEL)
        if layer is None:
            from localllm.errors import InvalidRequest

            raise InvalidRequest(f"{entry.name.display} has no model layer")
        return self.blobs.path(layer.digest)

    def model_paths(self, entry: Entry) -> builtins.list[Path]:
        """Paths of every GGUF model layer, in order (split GGUFs have one per shard)."""
        layers = entry.manifest.by_type(Media.MODEL)
        if not layers:
            from localllm.errors import InvalidRequest

            raise InvalidRequest(f"{entry.name.display} has no model layer")
        return [self.blobs.path(layer.digest) for layer in layers]

    def adapter_paths(self, entry: Entry) -> builtins.list[Path]:
        """Paths of the manifest's LoRA adapter layers, in order."""
        return [self.blobs.path(layer.digest) for layer in entry.manifest.by_type(Media.ADAPTER)]

    def projector_path(self, entry: Entry) -> Path | None:
        """Path of the manifest's vision projector (``mmproj``) layer, if it has one."""
        return self._first_path(entry, Media.PROJECTOR)

    def draft_path(self, entry: Entry) -> Path | None:
        """Path of the manifest's draft model GGUF (Modelfile ``DRAFT``), if it has one."""
        return self._first_path(entry, Media.DRAFT)

    def _first_path(self, entry: Entry, media_type: str) -> Path | None:
        layer = entry.manifest.first(media_type)
        return self.blobs.path(layer.digest) if layer is not None else None

    def read_json_layer(self, entry: Entry, media_type: str) -> Any:
        layer = entry.manifest.first(media_type)
        if layer is None:
            return None
        return json.loads(self.blobs.read_bytes(layer.digest))

    def read_text_layer(self, entry: Entry, media_type: str) -> str | None:
        layer = entry.manifest.first(media_type)
        if layer is None:
            return None
        return self.blobs.read_bytes(layer.digest).decode("utf-8", "replace")

    def params(self, entry: Entry) -> dict[str, Any]:
        value = self.read_json_layer(entry, Media.PARAMS)
        return value if isinstance(value, dict) else {}

    def template(self, entry: Entry) -> str | None:
        return self.read_text_layer(entry, Media.TEMPLATE)

    def system(self, entry: Entry) -> str | None:
        return self.read_text_layer(entry, Media.SYSTEM)

    def config_json(self, entry: Entry) -> dict[str, Any]:
        try:
            value = json.loads(self.blobs.read_bytes(entry.manifest.config.digest))
        except Exception:
            return {}
        return value if isinstance(value, dict) else {}

    # -- writing -------------------------------------------------------------
    def put_bytes(
        self, media_type: str, data: bytes, name: str | None = None, *, hold: Hold | None = None
    ) -> Layer:
        """Store ``data`` as a blob; ``hold``: held before it is written, so a delete of a
        model with the same layer cannot collect it before the caller commits."""
        if hold is not None:
            hold.add(f"sha256:{hashlib.sha256(data).hexdigest()}")
        digest = self.blobs.write_bytes(data)
        return Layer(media_type, digest, len(data), name)

    def put_json(self, media_type: str, value: Any, *, hold: Hold | None = None) -> Layer:
        return self.put_bytes(media_type, json.dumps(value, sort_keys=True).encode(), hold=hold)

    def put_config(self, value: dict[str, Any], *, hold: Hold | None = None) -> Layer:
        return self.put_json(CONFIG_MEDIA_TYPE, value, hold=hold)

    def commit(self, name: ModelName, manifest: Manifest) -> str:
        """Write the manifest for ``name`` (all blobs must be present), then prune."""
        with self.lock:
            missing = [d for d in manifest.digests() if not self.blobs.exists(d)]
            if missing:
                from localllm.errors import BlobNotFound

                raise BlobNotFound(f'blob "{missing[0]}" not found')
            previous: set[str] = set()
            if self.manifests.exists(name):
                previous = self.manifests.read(name).manifest.digests()
            digest = self.manifests.write(name, manifest)
            self._drop_unreferenced(previous - manifest.digests())
            return digest

    def copy(self, source: ModelName, destination: ModelName) -> None:
        """Point ``destination`` at ``source``'s manifest; blobs only the replaced
        manifest used are collected, as after a delete."""
        with self.lock:
            entry = self.manifests.read(source)
            previous: set[str] = set()
            if self.manifests.exists(destination):
                previous = self.manifests.read(destination).manifest.digests()
            self.manifests.write(destination, entry.manifest)
            self._drop_unreferenced(previous - entry.manifest.digests())

    def delete(self, name: ModelName) -> None:
        with self.lock:
            removed = self.manifests.delete(name)
            # Deleting a model frees its space even with LOCALLLM_NOPRUNE, as Ollama's
            # delete does: the setting keeps what start-up and replacements would remove.
            self._drop_unreferenced(removed.digests(), deleting=True)

    def _drop_unreferenced(self, candidates: set[str], *, deleting: bool = False) -> None:
        """Remove those of ``candidates`` no manifest uses any more.

        Only blobs of a replaced or deleted manifest are candidates, so blobs
        written by a pull or create that has not committed yet are never touched.
        """
        if not candidates or (config.NOPRUNE.get() and not deleting):
            return
        in_use = self.manifests.referenced()
        for digest in candidates - in_use:
            if digest in self._held:
                self._doomed.add(digest)  # removed when its last hold ends, if still unused
            else:
                self.blobs.remove(digest)

    def prune(self, grace_seconds: float = 3600.0) -> builtins.list[str]:
        """Remove blobs no manifest references and older than the grace period.

        Run at daemon start (unless LOCALLLM_NOPRUNE); the grace period spares
        blobs of operations still in flight.  Temp files (``blobs/.tmp-*``,
        ``manifests/**/.tmp-*``) of writers that have died go at once, even with
        LOCALLLM_NOPRUNE (they are never data); ``-partial`` downloads stay for resume.
        """
        with self.lock:
            self.manifests.remove_stale_tmp()
            if config.NOPRUNE.get():
                self.blobs.remove_stale_tmp()
                return []
            keep = self.manifests.referenced() | set(self._held)
            return self.blobs.prune(keep, grace_seconds=grace_seconds)

    def prune_partials(
        self, *, daemon_pid: int | None = None, dry_run: bool = False, now: float | None = None
    ) -> PartialsReport:
        """Remove resumable partial downloads that no live process is writing.

        A partial is kept when a running process holds it open (``/proc``), and, while
        the daemon ``daemon_pid`` is alive, when it was written in the last minute or
        (without ``/proc``) always: there is then no telling whether one of its pulls owns it.
        """
        report = PartialsReport()
        partials = self.blobs.partials()
        busy = open_by_live_process(partials)
        daemon_alive = daemon_pid is not None and pid_alive(daemon_pid)
        now = time.time() if now is None else now
        for path in partials:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if busy is not None and path in busy:
                report.kept.append((path, "open by a running process"))
            elif daemon_alive and busy is None:
                report.kept.append((path, f"the daemon (pid {daemon_pid}) may be writing it"))
            elif daemon_alive and now - st.st_mtime < PARTIAL_QUIET_S:
                report.kept.append(
                    (path, f"written in the last minute while the daemon (pid {daemon_pid}) runs")
                )
            else:
                if not dry_run:
                    path.unlink(missing_ok=True)
                report.removed.append((path, st.st_size))
        return report
