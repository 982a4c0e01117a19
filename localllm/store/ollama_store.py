"""Reading an Ollama model store (``OLLAMA_MODELS``), never writing to it.

Ollama's layout is ours (DESIGN §5): ``manifests/<host>/<namespace>/<model>/<tag>``
(schema-2 JSON with Ollama's media types) and ``blobs/sha256-<hex>``.  ``OllamaStore.scan``
reads every manifest and checks all that can be checked without reading the weights:
the name, the JSON, each layer's media type, that each blob is a regular file inside
the store and of the size the manifest says, the small layers' digests and contents,
and the GGUF headers of the weights.  The weights' digests are checked as they are
linked or copied (``store/ollama_import.py``).

Every file is opened read-only (and non-blocking, so a FIFO planted in the store
cannot hang us); symlinks are followed only where they stay inside the store's
``manifests/`` or ``blobs/`` folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from localllm import paths
from localllm.errors import InvalidModelFile, InvalidRequest, LocalLLMError, NotFound
from localllm.store.blobs import MAX_TEXT_LAYER
from localllm.store.manifests import CONFIG_MEDIA_TYPE, MAX_MANIFEST_BYTES, Layer, Manifest, Media
from localllm.store.names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName, parse_name

_IMAGE = "application/vnd.ollama.image."
# Ollama's layer media types -> ours (the same names but for the two it renamed).
MEDIA_TYPES = {
    **{
        m: m
        for m in (
            Media.MODEL,
            Media.PROJECTOR,
            Media.ADAPTER,
            Media.TEMPLATE,
            Media.SYSTEM,
            Media.PARAMS,
            Media.LICENSE,
            Media.MESSAGES,
            Media.DRAFT,
        )
    },
    _IMAGE + "prompt": Media.TEMPLATE,  # the template layer's old name; Ollama reads both
    _IMAGE + "draft": Media.DRAFT,  # a draft GGUF for speculative decoding, as our DRAFT
}
# Ollama ignores this one itself (embeddings in Modelfiles, gone since 0.1.x): dropped.
DROPPED = {_IMAGE + "embed"}
# Safetensors stored tensor by tensor (Ollama's MLX engine): not GGUF, nothing we can load.
TENSOR_TYPES = {_IMAGE + "tensor", _IMAGE + "json"}
TEXT_TYPES = (Media.TEMPLATE, Media.SYSTEM, Media.PARAMS, Media.MESSAGES, Media.LICENSE)
# Layers Ollama keeps one of (a later one replaces an earlier one when it reads a model).
SINGLE_TYPES = (Media.TEMPLATE, Media.SYSTEM, Media.PARAMS, Media.MESSAGES)
MAX_CONFIG_BYTES = 1 << 20


class Broken(InvalidRequest):
    """One entry of the Ollama store cannot be imported; the message says why."""


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    path: Path  # the file in the Ollama store, symlinks resolved


@dataclass
class Found:
    """One manifest of the Ollama store: importable when ``problem`` is empty."""

    label: str  # the name as ``ollama list`` shows it, or the path when it is none
    name: ModelName | None = None
    manifest: Manifest | None = None  # with our media types
    blobs: list[Blob] = field(default_factory=list)  # every blob it needs, config first
    problem: str = ""
    remote: str = ""  # a cloud model's host: nothing of it is stored locally
    config: dict[str, Any] = field(default_factory=dict)
    texts: dict[str, Any] = field(default_factory=dict)  # template, system, params, messages
    notes: list[str] = field(default_factory=list)


def printable(text: str) -> str:
    """``text`` safe to print: names come from a folder anyone could have written."""
    return "".join(c if c.isprintable() else "?" for c in text)[:200]


def ollama_label(parts: tuple[str, ...]) -> str:
    """How ``ollama list`` shows the manifest at ``parts`` (its ``DisplayShortest``)."""
    if len(parts) != 4:
        return printable("/".join(parts))
    host, namespace, model, tag = parts
    if host.lower() != DEFAULT_HOST:
        text = f"{host}/{namespace}/{model}:{tag}"
    elif namespace.lower() != DEFAULT_NAMESPACE:
        text = f"{namespace}/{model}:{tag}"
    else:
        text = f"{model}:{tag}"
    return printable(text)


def find_store(path: Path | None) -> Path:
    """The Ollama store to read: ``path`` (or its ``models/``, when given the ``.ollama``
    folder), else the first of ``paths.ollama_models()`` that holds a ``manifests/`` folder."""
    if path is not None:
        path = path.expanduser()
        if not (path / "manifests").is_dir() and (path / "models" / "manifests").is_dir():
            path = path / "models"
        if not path.is_dir():
            raise NotFound(f"{printable(str(path))} is not a folder")
        if not (path / "manifests").is_dir():
            raise NotFound(
                f"{printable(str(path))} is not an Ollama model store (it has no manifests/ folder)"
            )
        return path
    candidates = paths.ollama_models()
    for candidate in candidates:
        if (candidate / "manifests").is_dir():
            return candidate
    looked = " or ".join(printable(str(c)) for c in candidates)
    raise NotFound(
        f"no Ollama model store at {looked}; name its folder: localllm import ollama PATH"
    )


def _inside(path: Path, real_root: str) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading; ``Broken`` unless it is a regular file.  Opened
    non-blocking, so a FIFO or device planted in the store cannot hang the import."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise Broken(f"cannot read {path.name}: {exc.strerror}") from None
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise Broken(f"{path.name} is not a regular file")
    return fh


def read_regular(path: Path, limit: int) -> bytes:
    """Up to ``limit`` bytes of the regular file at ``path`` (``Broken`` otherwise)."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Broken(f"{path.name} is larger than {limit >> 10} KiB")
    return data


class OllamaStore:
    """An Ollama store at ``root`` (``find_store``), read-only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.blobs_dir = root / "blobs"
        self._real_manifests = os.path.realpath(self.manifests)
        self._real_blobs = os.path.realpath(self.blobs_dir)
        # Per digest: what the blob is, or why it cannot be used (shared by models).
        self._blobs: dict[str, Blob | str] = {}
        self._texts: dict[str, bytes | str] = {}

    def scan(self) -> list[Found]:
        """Every manifest below ``manifests/``, sorted by its path."""
        out: list[Found] = []
        self._walk(self.manifests, (), out)
        return out

    def _walk(self, folder: Path, parts: tuple[str, ...], out: list[Found]) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            out.append(
                Found(
                    ollama_label(parts) or "manifests",
                    problem=f"cannot read the folder: {exc.strerror}",
                )
            )
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue  # .DS_Store and the like, and temp files of a writer
            here = (*parts, entry.name)
            path = Path(entry.path)
            if entry.is_symlink() and not _inside(path, self._real_manifests):
                out.append(
                    Found(ollama_label(here), problem="a symlink pointing out of the Ollama store")
                )
            elif len(here) < 4:
                if entry.is_dir():
                    self._walk(path, here, out)
                # (a file above the tag level is no manifest: Ollama ignores it too)
            elif not entry.is_dir():
                out.append(self._read(here, path))

    def _read(self, parts: tuple[str, ...], path: Path) -> Found:
        found = Found(ollama_label(parts))
        try:
            found.name = _name(parts)
            self._load(found, path)
        except Broken as exc:
            found.problem = exc.message
        return found

    def _load(self, found: Found, path: Path) -> None:
        data = read_regular(Path(os.path.realpath(path)), MAX_MANIFEST_BYTES)
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise Broken("the manifest is not valid JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
            raise Broken("the manifest has no layers list")
        try:
            config = Layer.from_json(doc.get("config"))
            raw = [Layer.from_json(item) for item in doc["layers"]]
        except LocalLLMError as exc:
            raise Broken(f"the manifest is malformed: {exc.message}") from None
        if config.media_type != CONFIG_MEDIA_TYPE:
            raise Broken(f"unknown config media type {printable(config.media_type)!r}")
        layers = self._map_layers(found, raw)
        found.blobs = [self._blob(layer) for layer in self._unique([config, *layers])]
        found.config = self._json(config, dict, "config")
        models = [ly for ly in layers if ly.media_type == Media.MODEL]
        remote = found.config.get("remote_host")
        if not models and isinstance(remote, str) and remote:
            found.remote = printable(remote)
            return
        if not models:
            raise Broken("it has no GGUF model layer")
        self._texts_of(found, layers)
        self._check_ggufs(layers)
        found.manifest = Manifest(config, layers)

    def _map_layers(self, found: Found, raw: list[Layer]) -> list[Layer]:
        layers: list[Layer] = []
        for layer in raw:
            media = layer.media_type
            if media in TENSOR_TYPES:
                raise Broken(
                    "it is stored as safetensors tensors (Ollama's MLX engine), "
                    "not GGUF: localllm cannot run it"
                )
            if media in DROPPED:
                found.notes.append(
                    f"left out its {media.removeprefix(_IMAGE)} layer "
                    "(obsolete; Ollama ignores it too)"
                )
                continue
            ours = MEDIA_TYPES.get(media)
            if ours is None:
                raise Broken(f"unknown layer media type {printable(media)!r}")
            if ours in SINGLE_TYPES:
                # Ollama reads the layers in order and the last one of a kind wins.
                layers = [ly for ly in layers if ly.media_type != ours]
            layers.append(Layer(ours, layer.digest, layer.size, layer.name))
        return layers

    @staticmethod
    def _unique(layers: list[Layer]) -> list[Layer]:
        seen: dict[str, Layer] = {}
        for layer in layers:
            seen.setdefault(layer.digest, layer)
        return list(seen.values())

    def _blob(self, layer: Layer) -> Blob:
        """The blob of ``layer``, checked for place, kind and size (not yet its digest)."""
        known = self._blobs.get(layer.digest)
        if known is None:
            try:
                known = self._find_blob(layer)
            except Broken as exc:
                known = exc.message
            self._blobs[layer.digest] = known
        if isinstance(known, str):
            raise Broken(known)
        if known.size != layer.size:
            raise Broken(
                f"blob {layer.digest} is {known.size} bytes, the manifest says {layer.size}"
            )
        return known

    def _find_blob(self, layer: Layer) -> Blob:
        path = self.blobs_dir / layer.digest.replace(":", "-")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise Broken(f"blob {layer.digest} is missing") from None
        except OSError as exc:
            raise Broken(f"blob {layer.digest}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            if not _inside(path, self._real_blobs):
                raise Broken(f"blob {layer.digest} is a symlink pointing out of the Ollama store")
            path = Path(os.path.realpath(path))
            try:
                st = os.stat(path)
            except OSError:
                raise Broken(f"blob {layer.digest} is a broken symlink") from None
        if not stat.S_ISREG(st.st_mode):
            raise Broken(f"blob {layer.digest} is not a regular file")
        return Blob(layer.digest, st.st_size, path)

    def _bytes(self, layer: Layer, limit: int) -> bytes:
        """A small blob's bytes, checked against its digest (read once per digest)."""
        known = self._texts.get(layer.digest)
        if known is None:
            try:
                data = read_regular(self._blob(layer).path, limit)
                got = "sha256:" + hashlib.sha256(data).hexdigest()
                if got != layer.digest:
                    raise Broken(
                        f"blob {layer.digest} does not match its digest (it hashes to {got})"
                    )
                known = data
            except Broken as exc:
                known = exc.message
            self._texts[layer.digest] = known
        if isinstance(known, str):
            raise Broken(known)
        return known

    def _json(self, layer: Layer, kind: type, what: str) -> Any:
        try:
            value = json.loads(
                self._bytes(layer, MAX_CONFIG_BYTES if what == "config" else MAX_TEXT_LAYER)
            )
        except (ValueError, UnicodeDecodeError):
            raise Broken(f"its {what} layer is not valid JSON") from None
        if not isinstance(value, kind):
            raise Broken(f"its {what} layer is not a JSON {'object' if kind is dict else 'list'}")
        return value

    def _texts_of(self, found: Found, layers: list[Layer]) -> None:
        for layer in layers:
            media = layer.media_type
            if media not in TEXT_TYPES:
                continue
            key = media.removeprefix(_IMAGE)
            if media == Media.PARAMS:
                found.texts[key] = self._json(layer, dict, "params")
            elif media == Media.MESSAGES:
                found.texts[key] = self._json(layer, list, "messages")
            else:
                try:
                    text = self._bytes(layer, MAX_TEXT_LAYER).decode("utf-8")
                except UnicodeDecodeError:
                    raise Broken(f"its {key} layer is not UTF-8 text") from None
                if media != Media.LICENSE:
                    found.texts[key] = text

    def _check_ggufs(self, layers: list[Layer]) -> None:
        """The weights' GGUF headers (the bounded reader: a hostile file is refused early)."""
        from localllm.gguf.info import read_model_info, read_model_info_split
        from localllm.store.projector import projector_header

        def path(layer: Layer) -> Path:
            return self._blob(layer).path

        try:
            what = "model"
            info = read_model_info_split(
                [path(ly) for ly in layers if ly.media_type == Media.MODEL]
            )
            if info.is_adapter:
                raise Broken("its model layer is a LoRA adapter, not a model")
            for layer in layers:
                what = layer.media_type.removeprefix(_IMAGE).rsplit(".", 1)[-1]
                if layer.media_type == Media.PROJECTOR:
                    projector_header(path(layer), "its projector")
                elif layer.media_type == Media.ADAPTER:
                    if not read_model_info(path(layer)).is_adapter:
                        raise Broken("its adapter layer is not a LoRA adapter")
                elif layer.media_type == Media.DRAFT:
                    read_model_info(path(layer))
        except InvalidModelFile as exc:
            raise Broken(
                f"its {what} layer is not a GGUF localllm can read: {exc.message}"
            ) from None
        except OSError as exc:
            raise Broken(f"its {what} layer cannot be read: {exc.strerror}") from None


def _name(parts: tuple[str, ...]) -> ModelName:
    """Our name for the manifest at ``parts``; ``Broken`` when it is not a valid one."""
    host, namespace, model, tag = parts
    try:
        name = parse_name(f"{host}/{namespace}/{model}:{tag}")
    except LocalLLMError:
        name = None
    # The parser must read back the same parts (a host may only change to its canonical
    # spelling, huggingface.co -> hf.co), or the folder names were no name at all.
    if name is None or (name.namespace, name.model, name.tag) != (namespace, model, tag):
        raise Broken("not a valid model name")
    return name
