"""Fixtures for route tests: a store under the test's LOCALLLM_HOME, the app, an ASGI client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm import paths
from localllm.server.app import create_app
from localllm.store.local import Store
from localllm.store.manifests import (
    MEDIA_LICENSE,
    MEDIA_MODEL,
    MEDIA_PARAMS,
    MEDIA_SYSTEM,
    MEDIA_TEMPLATE,
    Manifest,
)
from localllm.store.names import parse_name
from tests.ggufmeta import Shape, write_gguf
from tests.hubstub import HubStub

BASE_URL = "http://localhost:11434"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store() -> Store:
    return Store(paths.models())


@pytest.fixture
def app(store: Store) -> FastAPI:
    return create_app(store, bind_host="127.0.0.1")


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


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
    from localllm.store.manifests import Layer

    layers = [Layer(MEDIA_MODEL, digest, size)]
    if template is not None:
        layers.append(store.put_bytes(MEDIA_TEMPLATE, template.encode()))
    if system is not None:
        layers.append(store.put_bytes(MEDIA_SYSTEM, system.encode()))
    layers.append(store.put_json(MEDIA_PARAMS, params if params is not None else {
        "stop": ["<|end|>", "</s>"], "temperature": 0.7,
    }))
    if license_text is not None:
        layers.append(store.put_bytes(MEDIA_LICENSE, license_text.encode()))
    config = store.put_config({
        "model_format": "gguf", "model_family": "llama", "model_families": ["llama"],
        "model_type": "1.2M", "file_type": "F32",
    })
    return store.commit(parse_name(name), Manifest(config, layers))


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    """The local Hub stand-in with one repo, ``someone/Tiny-GGUF``, holding two quants."""
    stub = HubStub(tmp_path / "hub").start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    for quant in ("Q4_K_M", "Q8_0"):
        gguf = write_gguf(tmp_path / f"tiny-{quant}.gguf", Shape(name=f"tiny {quant}"), quant)
        stub.add_file("someone/Tiny-GGUF", f"tiny-{quant}.gguf", gguf)
    stub.add_file("someone/Tiny-GGUF", "README.md", b"# tiny\n")
    try:
        yield stub
    finally:
        stub.stop()
