"""The API client against the app in-process: answers, error types, streams."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm.api.client import AsyncClient, DaemonUnreachable, error_for
from localllm.errors import (
    BlobNotFound,
    Forbidden,
    InvalidRequest,
    LocalLLMError,
    ModelNotFound,
    PullError,
    ServerBusy,
)
from localllm.store.local import Store
from tests.support.models import add_model
from tests.support.routes import BASE_URL

pytestmark = pytest.mark.anyio


def _client(app: FastAPI) -> AsyncClient:
    return AsyncClient(BASE_URL, transport=httpx.ASGITransport(app=app))


async def test_client_round_trip(app: FastAPI, store: Store, tmp_path: Path) -> None:
    add_model(store, tmp_path, "tiny")
    async with _client(app) as c:
        assert await c.heartbeat()
        assert await c.version()
        assert [m["name"] for m in await c.list()] == ["tiny:latest"]
        assert (await c.show("tiny"))["details"]["family"] == "llama"
        await c.copy("tiny", "copy:1")
        await c.delete("tiny")
        assert [m["name"] for m in await c.list()] == ["copy:1"]
        with pytest.raises(ModelNotFound, match="not found"):
            await c.show("tiny")
        with pytest.raises(InvalidRequest, match="invalid"):
            await c.delete("../x")


async def test_client_streams_and_raises_error_lines(app: FastAPI) -> None:
    def pull(
        model: str,
        progress: Any,
        *,
        cancel: threading.Event | None = None,
        projector: str | None = None,
        **fit: Any,
    ) -> None:
        progress({"status": "pulling manifest"})
        raise PullError("hub went away")

    app.state.models.pull = pull
    got = []
    async with _client(app) as c:
        with pytest.raises(LocalLLMError, match="hub went away"):
            async for event in c.pull("hf.co/u/r"):
                got.append(event)
    assert got == [{"status": "pulling manifest"}]


def test_error_mapping_by_status_and_route() -> None:
    assert isinstance(error_for(400, "x"), InvalidRequest)
    assert isinstance(error_for(403, "x"), Forbidden)
    assert isinstance(error_for(404, "x", "/api/show"), ModelNotFound)
    assert isinstance(error_for(404, "x", "/api/blobs/sha256:00"), BlobNotFound)
    assert isinstance(error_for(503, "x"), ServerBusy)
    err = error_for(500, "boom")
    assert (type(err), err.status, str(err)) == (LocalLLMError, 500, "boom")


async def test_unreachable_daemon_is_a_clear_error() -> None:
    async with AsyncClient("http://127.0.0.1:9") as c:
        with pytest.raises(DaemonUnreachable, match="localllm serve"):
            await c.list()


def test_ensure_daemon_never_starts_a_remote_one() -> None:
    from localllm.api.client import ensure_daemon

    with pytest.raises(DaemonUnreachable):
        ensure_daemon("http://192.0.2.1:11434", wait=1)
