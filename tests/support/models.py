"""Models put into the test's store: ``import_gguf`` (GGUF files on disk stored as a model,
as a pull stores its downloads), ``add_model`` (a metadata-valid GGUF with a full set of
layers, for route tests) and ``add_tiny`` (the tiny model, imported as a daemon serves it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from localllm import paths
from localllm.gguf.info import read_model_info_split
from localllm.store.importer import config_for
from localllm.store.local import Store
from localllm.store.manifests import Entry, Layer, Manifest, Media
from localllm.store.names import ModelName, parse_name
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.tinymodel import make_tiny_model


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
        layers.append(Layer(Media.MODEL, digest, size, Path(path).name if split else None))
    if projector is not None:
        digest, size = store.blobs.import_file(Path(projector))
        layers.append(Layer(Media.PROJECTOR, digest, size, Path(projector).name))
    if template is not None:
        layers.append(store.put_bytes(Media.TEMPLATE, template.encode()))
    if system is not None:
        layers.append(store.put_bytes(Media.SYSTEM, system.encode()))
    if params:
        layers.append(store.put_json(Media.PARAMS, params))
    store.commit(name, Manifest(store.put_config(config_for(info)), layers))
    return store.get(name)


def add_model(
    store: Store,
    tmp_path: Path,
    name: str = "tiny:latest",
    *,
    template: str | None = "{{ .System }} {{ .Prompt }}",
    system: str | None = "You are terse.",
    params: dict[str, Any] | None = None,
    license_text: str | None = "MIT License\nCopyright (c) test",
    shape: Shape | None = None,
) -> str:
    """Put a small real GGUF model into the store; returns the manifest digest."""
    gguf = write_gguf(tmp_path / f"{name.replace('/', '_').replace(':', '_')}.gguf", shape)
    digest, size = store.blobs.import_file(gguf)
    layers = [Layer(Media.MODEL, digest, size)]
    if template is not None:
        layers.append(store.put_bytes(Media.TEMPLATE, template.encode()))
    if system is not None:
        layers.append(store.put_bytes(Media.SYSTEM, system.encode()))
    layers.append(
        store.put_json(
            Media.PARAMS,
            params
            if params is not None
            else {
                "stop": ["<|end|>", "</s>"],
                "temperature": 0.7,
            },
        )
    )
    if license_text is not None:
        layers.append(store.put_bytes(Media.LICENSE, license_text.encode()))
    config = store.put_config(
        {
            "model_format": "gguf",
            "model_family": "llama",
            "model_families": ["llama"],
            "model_type": "1.2M",
            "file_type": "F32",
        }
    )
    return store.commit(parse_name(name), Manifest(config, layers))


def add_tiny(tmp_path: Path, name: str = "tiny", **variant: object) -> Path:
    """The tiny model (``variant``: make_tiny_model's options) stored as ``name``."""
    folder = tmp_path / f"gguf-{name}"
    folder.mkdir(exist_ok=True)
    path = make_tiny_model(folder, **variant)  # type: ignore[arg-type]
    import_gguf(Store(paths.models()), parse_name(name), [path])
    return path
