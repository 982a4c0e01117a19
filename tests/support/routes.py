"""Route-test fixtures (a plugin, see tests/conftest.py): a store under the test's
LOCALLLM_HOME, the app on it, and an ASGI client; plus ``ndjson`` to read streamed answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm import paths
from localllm.server.app import create_app
from localllm.store.local import Store

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


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
