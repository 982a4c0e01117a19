"""Manifests: ``manifests/<host>/<namespace>/<model>/<tag>``, OCI-style JSON.

A manifest lists a config blob and layers (Ollama's media types).  It is
written last, atomically, once every blob it names is in the store, so a
manifest on disk always describes a complete model.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NotRequired, TypedDict

from localllm.errors import InvalidRequest, ModelNotFound
from localllm.store.names import ModelName, parse_digest, parse_name
from localllm.store.tempfiles import atomic_write_bytes, stale_tmp

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
_PREFIX = "application/vnd.ollama.image."


class Media:
    """Layers' media types, one name for each; the strings are Ollama's, as its registry
    and its store write them, so a manifest reads the same on either side."""

    MODEL: Final = _PREFIX + "model"
    PROJECTOR: Final = _PREFIX + "projector"
    ADAPTER: Final = _PREFIX + "adapter"
    TEMPLATE: Final = _PREFIX + "template"
    SYSTEM: Final = _PREFIX + "system"
    PARAMS: Final = _PREFIX + "params"
    LICENSE: Final = _PREFIX + "license"
    MESSAGES: Final = _PREFIX + "messages"
    # Ours (Ollama has none): a draft model for speculative decoding (Modelfile DRAFT), a
    # GGUF of the same vocabulary; the layer points at that GGUF's blob, shared with its
    # own model.
    DRAFT: Final = "application/vnd.localllm.draft"


MAX_MANIFEST_BYTES = 4 << 20


class LayerJSON(TypedDict):
    """A layer (or the config) as a manifest file writes it, in Ollama's field names."""

    mediaType: str
    digest: str
    size: int
    name: NotRequired[str]


@dataclass(frozen=True)
class Layer:
    media_type: str
    digest: str
    size: int
    # Original file name, kept for split GGUF shards and adapters.
    name: str | None = None

    def to_json(self) -> LayerJSON:
        out: LayerJSON = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.name:
            out["name"] = self.name
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Layer:
        if not isinstance(obj, dict):
            raise InvalidRequest("manifest layer is not an object")
        media = obj.get("mediaType")
        size = obj.get("size")
        name = obj.get("name")
        if not isinstance(media, str) or not isinstance(size, int) or size < 0:
            raise InvalidRequest("manifest layer is malformed")
        if name is not None and not isinstance(name, str):
            raise InvalidRequest("manifest layer name is malformed")
        return cls(media, parse_digest(obj.get("digest")), size, name)


@dataclass(frozen=True)
class Manifest:
    config: Layer
    layers: list[Layer] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        doc = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": self.config.to_json(),
            "layers": [layer.to_json() for layer in self.layers],
        }
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"manifest is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
            raise InvalidRequest("manifest is malformed")
        return cls(Layer.from_json(doc.get("config")), [Layer.from_json(x) for x in doc["layers"]])

    def digests(self) -> set[str]:
        return {self.config.digest, *(layer.digest for layer in self.layers)}

    def by_type(self, media_type: str) -> list[Layer]:
        return [layer for layer in self.layers if layer.media_type == media_type]

    def first(self, media_type: str) -> Layer | None:
        found = self.by_type(media_type)
        return found[0] if found else None

    @property
    def total_size(self) -> int:
        return self.config.size + sum(layer.size for layer in self.layers)


@dataclass(frozen=True)
class Entry:
    """A manifest found on disk with what ``/api/tags`` needs about it."""

    name: ModelName
    manifest: Manifest
    digest: str  # sha256 of the manifest file bytes
    modified: float  # mtime, seconds since the epoch


class ManifestStore:
    """The ``manifests/`` folder of a model store."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, name: ModelName) -> Path:
        return self.root.joinpath(*name.parts)

    def locate(self, name: ModelName) -> Path | None:
        """The manifest file for ``name``, matching each part case-insensitively."""
        exact = self._path(name)
        if exact.is_file():
            return exact
        current = self.root
        for part in name.parts:
            if not current.is_dir():
                return None
            low = part.lower()
            match = next((p for p in current.iterdir() if p.name.lower() == low), None)
            if match is None:
                return None
            current = match
        return current if current.is_file() else None

    def exists(self, name: ModelName) -> bool:
        return self.locate(name) is not None

    def read(self, name: ModelName) -> Entry:
        path = self.locate(name)
        if path is None:
            raise ModelNotFound(f"model '{name.display}' not found")
        return self._entry(name, path)

    def _entry(self, name: ModelName, path: Path) -> Entry:
        with open(path, "rb") as fh:
            data = fh.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise InvalidRequest(f"manifest of {name.display} is too large")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return Entry(name, Manifest.from_bytes(data), digest, path.stat().st_mtime)

    def write(self, name: ModelName, manifest: Manifest) -> str:
        """Write (or replace) the manifest; returns its digest."""
        existing = self.locate(name)
        path = existing if existing is not None else self._path(name)
        data = manifest.to_bytes()
        atomic_write_bytes(path, data)
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def delete(self, name: ModelName) -> Manifest:
        entry = self.read(name)
        path = self.locate(name)
        assert path is not None
        path.unlink()
        self._prune_empty(path.parent)
        return entry.manifest

    def _prune_empty(self, folder: Path) -> None:
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def remove_stale_tmp(self) -> list[Path]:
        """Remove ``.tmp-*`` files left by writers that died mid-write (``stale_tmp``)."""
        removed: list[Path] = []
        if not self.root.is_dir():
            return removed
        now = time.time()
        for dirpath, _dirs, files in os.walk(self.root):
            for fname in files:
                path = Path(dirpath) / fname
                if fname.startswith(".tmp-") and stale_tmp(path, now):
                    path.unlink(missing_ok=True)
                    removed.append(path)
                    self._prune_empty(path.parent)
        return removed

    def entries(self) -> Iterator[Entry]:
        """Every readable manifest; unreadable or misplaced files are skipped."""
        if not self.root.is_dir():
            return
        for dirpath, _dirs, files in os.walk(self.root):
            rel = Path(dirpath).relative_to(self.root)
            if len(rel.parts) != 3:
                continue
            for tag in files:
                if tag.startswith("."):
                    continue
                try:
                    name = parse_name("/".join(rel.parts) + ":" + tag)
                    yield self._entry(name, Path(dirpath) / tag)
                except Exception:
                    continue

    def referenced(self) -> set[str]:
        out: set[str] = set()
        for entry in self.entries():
            out |= entry.manifest.digests()
        return out
