"""The client side of ``create``: turn a parsed Modelfile into an ``/api/create`` request.

Local files (``FROM ./model.gguf``, ``FROM ./folder-of-split-ggufs``,
``ADAPTER ./lora.gguf``, ``PROJECTOR``, ``DRAFT ./small.gguf``) are resolved
relative to the Modelfile, hashed, and uploaded with ``POST /api/blobs/<digest>``
only when ``HEAD`` says the daemon lacks them; the request then names them by
digest.  ``FROM`` or ``DRAFT`` anything else (a model name, ``hf.co/…``) is
passed on for the daemon to resolve.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

from localllm.api import wire
from localllm.errors import InvalidRequest
from localllm.modelfile.parser import Modelfile
from localllm.modelfile.paths import looks_like_path, model_files, resolve_local

Event = Callable[[wire.Progress], None]  # an upload's progress, as the daemon's own lines


# The ``/api/create`` request a Modelfile makes: local files named by digest (``{file
# name: digest}``), anything else as written.  Functional form: ``from`` is a keyword.
CreateBody = TypedDict(
    "CreateBody",
    {
        "model": str,
        "stream": bool,
        "from": NotRequired[str],
        "files": NotRequired[dict[str, str]],
        "adapters": NotRequired[dict[str, str]],
        "projector": NotRequired[dict[str, str]],
        "draft": NotRequired[str | dict[str, str]],
        "template": NotRequired[str],
        "system": NotRequired[str],
        "license": NotRequired[list[str]],
        "parameters": NotRequired[dict[str, object]],
        "messages": NotRequired[list[dict[str, str]]],
        "quantize": NotRequired[str],
    },
)


class BlobClient(Protocol):
    def blob_exists(self, digest: str) -> bool: ...

    def upload_blob(
        self, digest: str, path: Path, progress: Callable[[int], None] | None = None
    ) -> None: ...


def file_digest(path: Path) -> str:
    from localllm.store.blobs import sha256_file

    return sha256_file(path)


def push_file(client: BlobClient, path: Path, emit: Event) -> str:
    """Make sure the daemon has ``path`` as a blob; returns its digest."""
    digest = file_digest(path)
    if client.blob_exists(digest):
        return digest
    size = path.stat().st_size
    status = f"copying file {digest}"
    emit({"status": status, "digest": digest, "total": size, "completed": 0})
    client.upload_blob(
        digest,
        path,
        lambda sent: emit({"status": status, "digest": digest, "total": size, "completed": sent}),
    )
    return digest


def local_from(mf: Modelfile, base_dir: Path) -> Path | None:
    """The local file or folder ``FROM`` names, or None when it names a model."""
    return local_path(mf.from_, base_dir)


def local_path(value: str, base_dir: Path) -> Path | None:
    """The local file or folder a ``FROM`` or ``DRAFT`` value names, or None for a model."""
    if looks_like_path(value):
        return resolve_local(value, base_dir)
    candidate = resolve_local(value, base_dir)
    # As Ollama's CLI: an existing file or folder of that name wins over a model name.
    return candidate if candidate.exists() else None


def build_request(
    mf: Modelfile,
    model: str,
    base_dir: Path,
    client: BlobClient,
    emit: Event,
    *,
    quantize: str | None = None,
) -> CreateBody:
    """The ``/api/create`` body for ``mf``, uploading the local files it names."""
    body: CreateBody = {"model": model, "stream": True}
    emit({"status": "gathering model components"})
    local = local_from(mf, base_dir)
    if local is not None:
        if not local.exists():
            raise InvalidRequest(f'FROM path "{mf.from_}" does not exist (line {mf.from_line})')
        body["files"] = {p.name: push_file(client, p, emit) for p in model_files(local)}
    else:
        body["from"] = mf.from_
    if mf.adapters:
        adapters: dict[str, str] = {}
        for raw in mf.adapters:
            path = resolve_local(raw, base_dir)
            if not path.is_file():
                raise InvalidRequest(f'ADAPTER file "{raw}" does not exist')
            adapters[path.name] = push_file(client, path, emit)
        body["adapters"] = adapters
    if mf.projector is not None:
        path = resolve_local(mf.projector, base_dir)
        if not path.is_file():
            raise InvalidRequest(f'PROJECTOR file "{mf.projector}" does not exist')
        body["projector"] = {path.name: push_file(client, path, emit)}
    if mf.draft is not None:
        body["draft"] = _draft(mf.draft, base_dir, client, emit)
    if mf.template is not None:
        body["template"] = mf.template
    if mf.system is not None:
        body["system"] = mf.system
    if mf.licenses:
        body["license"] = list(mf.licenses)
    if mf.parameters:
        body["parameters"] = dict(mf.parameters)
    if mf.messages:
        body["messages"] = list(mf.messages)
    if quantize:
        body["quantize"] = quantize
    return body


def _draft(value: str, base_dir: Path, client: BlobClient, emit: Event) -> str | dict[str, str]:
    """``DRAFT``: ``{file name: digest}`` of an uploaded GGUF, or a model name as given."""
    path = local_path(value, base_dir)
    if path is None:
        return value
    if not path.is_file():
        raise InvalidRequest(
            f'DRAFT file "{value}" does not exist'
            + (" (a draft model must be a single GGUF file)" if path.is_dir() else "")
        )
    return {path.name: push_file(client, path, emit)}
