"""Import local GGUF files into the store as a model (blobs + config + manifest).

Shared by pulls (which fetch the blobs first) and by ``create``/tests that
start from files on disk: ``config_for`` is the one place that derives the
config blob from GGUF metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from localllm.gguf.info import ModelInfo, read_model_info_split
from localllm.store.local import Store
from localllm.store.manifests import (
    MEDIA_MODEL,
    MEDIA_PARAMS,
    MEDIA_PROJECTOR,
    MEDIA_SYSTEM,
    MEDIA_TEMPLATE,
    Entry,
    Layer,
    Manifest,
)
from localllm.store.names import ModelName


def config_for(info: ModelInfo) -> dict[str, Any]:
    """The manifest's config blob (Ollama's fields) for a model with ``info``."""
    return {
        "model_format": "gguf",
        "model_family": info.architecture,
        "model_families": [info.architecture],
        "model_type": info.parameter_size,
        "file_type": info.file_type,
    }


def import_gguf(
    store: Store,
    name: ModelName,
    files: Sequence[Path],
    *,
    params: dict[str, Any] | None = None,
    template: str | None = None,
    system: str | None = None,
    projector: Path | None = None,
) -> Entry:
    """Copy ``files`` (one GGUF, or the parts of a split one in order) into the store as ``name``.

    The files are validated with ``gguf.info`` first, so a malformed GGUF never
    becomes a model; ``projector`` (an ``mmproj`` GGUF) must be a clip projector.
    """
    info = read_model_info_split([Path(f) for f in files])
    if projector is not None:
        from localllm.store.projector import projector_header

        projector_header(Path(projector))
    split = len(files) > 1
    layers: list[Layer] = []
    for path in files:
        digest, size = store.blobs.import_file(Path(path))
        layers.append(Layer(MEDIA_MODEL, digest, size, Path(path).name if split else None))
    if projector is not None:
        digest, size = store.blobs.import_file(Path(projector))
        layers.append(Layer(MEDIA_PROJECTOR, digest, size, Path(projector).name))
    if template is not None:
        layers.append(store.put_bytes(MEDIA_TEMPLATE, template.encode()))
    if system is not None:
        layers.append(store.put_bytes(MEDIA_SYSTEM, system.encode()))
    if params:
        layers.append(store.put_json(MEDIA_PARAMS, params))
    store.commit(name, Manifest(store.put_config(config_for(info)), layers))
    return store.get(name)
