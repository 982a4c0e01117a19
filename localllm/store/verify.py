"""``localllm verify [NAME]``: every blob of the store's models hashed again; damage repaired.

A blob's name is its sha256, checked when it was written; a disk, a copy or a
hand can still change it later, and nothing reads a whole GGUF back to notice
(the engine maps it).  ``verify`` reads each blob a model names (all models, or
the ones asked for), once even when several models share it, and reports the
ones that are missing, of the wrong size or whose bytes no longer hash to their
name, with the models that use them.

``repair`` pulls again each damaged model that was pulled (its config records
the ``origin``: ``hf.co/{repo}:{quant}``, or Ollama's registry): its damaged blobs
are removed first, since a blob already under its name is never rewritten, and
the pull fetches what is then missing, verified as every download is, and writes
the manifest again.  A model with no pull origin (made with ``create``) has
nowhere to be pulled from: it is reported as not repairable,
and so is one whose config blob, which holds the origin, is itself damaged.  A
model that shares a damaged blob with a pulled one is whole again once that pull
has fetched it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from localllm.errors import LocalLLMError
from localllm.store.blobs import CHUNK
from localllm.store.local import Store
from localllm.store.names import ModelName, parse_name
from localllm.store.progress import BlobProgress, Progress


@dataclass
class ModelCheck:
    name: str
    blobs: int
    size: int
    damaged: dict[str, str] = field(default_factory=dict)  # digest -> what is wrong
    repair: str = ""  # after --repair: "repaired", or why not

    @property
    def ok(self) -> bool:
        return not self.damaged


@dataclass
class VerifyReport:
    models: list[ModelCheck] = field(default_factory=list)
    blobs: int = 0  # distinct blobs checked
    bytes: int = 0  # bytes read
    seconds: float = 0.0

    @property
    def damaged(self) -> list[ModelCheck]:
        return [m for m in self.models if not m.ok]

    @property
    def unrepaired(self) -> list[ModelCheck]:
        return [m for m in self.damaged if m.repair != "repaired"]


def verify(
    store: Store, names: Iterable[ModelName] = (), progress: Progress | None = None
) -> VerifyReport:
    """Hash every blob of ``names`` (default: every model) and report the damaged ones."""
    started = time.monotonic()
    wanted = list(names)
    entries = (
        [store.get(n) for n in wanted]
        if wanted
        else sorted(store.list(), key=lambda e: e.name.display)
    )
    report = VerifyReport()
    found: dict[str, str] = {}  # digest -> "" (good) or what is wrong
    for entry in entries:
        layers = [entry.manifest.config, *entry.manifest.layers]
        check = ModelCheck(entry.name.display, len(layers), entry.manifest.total_size)
        for layer in layers:
            if layer.digest not in found:
                found[layer.digest] = _check_blob(store, layer.digest, layer.size, progress)
                report.blobs += 1
                report.bytes += layer.size if found[layer.digest] != "missing" else 0
            if found[layer.digest]:
                check.damaged[layer.digest] = found[layer.digest]
        report.models.append(check)
    report.seconds = time.monotonic() - started
    return report


def _check_blob(store: Store, digest: str, size: int, progress: Progress | None) -> str:
    """An empty string when the blob is whole, else what is wrong with it."""
    path = store.blobs.path(digest)
    try:
        actual = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if actual != size:
        return f"{actual} bytes, not {size}"
    h = hashlib.sha256()
    done = 0
    report = BlobProgress(progress, f"verifying {digest[7:19]}", digest, size)
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
                done += len(chunk)
                report(done)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    got = f"sha256:{h.hexdigest()}"
    return "" if got == digest else "its bytes do not match its digest"


PullFn = Callable[[ModelName, ModelName | None, str | None, str | None], Any]


def repair(store: Store, report: VerifyReport, pull: PullFn) -> None:
    """Pull again every damaged model that has a pull origin; sets each one's ``repair``.

    ``pull(name, source, projector, via)``: for a Hugging Face origin, ``store/pull.py``'s
    ``pull_model`` of ``source`` with the caller's progress (the CLI's bars); with
    ``source`` None (another origin, Ollama's registry), a pull of ``name`` as ``localllm
    pull NAME`` makes it, which follows the model's origin.  Models are repaired one by
    one: a failure is recorded and the next one is tried.
    """
    restored: set[str] = set()
    for check in report.damaged:
        if set(check.damaged) <= restored:
            check.repair = "repaired"  # by the pull of a model that shares the blobs
            continue
        name = parse_name(check.name)
        entry = store.get(name)
        origin: Any = None
        if entry.manifest.config.digest not in check.damaged:  # else its origin is unsure
            origin = store.config_json(entry).get("origin")
        if not isinstance(origin, dict) and name.is_hf:
            origin = {"source": name.display}  # the name itself says what to pull
        source = origin.get("source") if isinstance(origin, dict) else None
        if not isinstance(source, str) or not source:
            check.repair = (
                "not repairable: its config, which says where it came from, is damaged"
                if entry.manifest.config.digest in check.damaged
                else "not repairable: it has no pull origin (it was made here)"
            )
            continue
        try:
            with store.lock:  # a blob already under its name is never rewritten: make room
                for digest in set(check.damaged) - restored:
                    store.blobs.remove(digest)
            if source.startswith("hf.co/"):
                projector = origin.get("projector")
                chosen = projector.get("file") if isinstance(projector, dict) else None
                via = origin.get("catalog")
                pull(
                    name,
                    parse_name(source),
                    # A recorded origin names its projector, if any; a bare name chooses anew.
                    chosen if isinstance(chosen, str) else ("none" if "files" in origin else None),
                    via if isinstance(via, str) else None,
                )
            else:
                pull(name, None, None, None)
        except LocalLLMError as exc:
            check.repair = f"the pull failed: {exc.message}"
            continue
        check.repair = "repaired"
        # Back under its name means fetched and verified again (a Hub file that changed
        # since is not: the model now uses the new one).
        restored |= {d for d in check.damaged if store.blobs.exists(d)}
    for check in report.damaged:  # whole again through another model's pull
        if check.repair != "repaired" and set(check.damaged) <= restored:
            check.repair = "repaired"
