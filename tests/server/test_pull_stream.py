"""/api/pull streaming semantics with a stand-in pull, and the thread-to-stream bridge."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm.errors import ModelNotFound, PullError
from localllm.server.streaming import events_from_thread
from tests.support.hubstub import HubStub
from tests.support.routes import ndjson

pytestmark = pytest.mark.anyio

LAYER = {"status": "pulling 0123456789ab", "digest": "sha256:" + "0" * 64, "total": 10}
EVENTS: list[dict[str, Any]] = [
    {"status": "pulling manifest"},
    {**LAYER, "completed": 5},
    {**LAYER, "completed": 10},
    {"status": "verifying sha256 digest"},
    {"status": "writing manifest"},
    {"status": "success"},
]


def fake_pull(
    app: FastAPI, *, fail_after: int | None = None, exc: Exception | None = None
) -> list[str]:
    seen: list[str] = []

    def pull(
        model: str,
        progress: Any,
        *,
        cancel: threading.Event | None = None,
        projector: str | None = None,
        **_fit_check: Any,
    ) -> None:
        seen.append(model)
        for i, event in enumerate(EVENTS):
            if fail_after is not None and i == fail_after:
                assert exc is not None
                raise exc
            progress(event)

    app.state.models.pull = pull
    return seen


async def test_pull_streams_ndjson_progress(app: FastAPI, client: httpx.AsyncClient) -> None:
    seen = fake_pull(app)
    r = await client.post("/api/pull", json={"model": "hf.co/u/r:q4_k_m"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert ndjson(r.text) == EVENTS
    assert seen == ["hf.co/u/r:q4_k_m"]


async def test_pull_without_stream_returns_one_object(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    fake_pull(app)
    r = await client.post("/api/pull", json={"model": "hf.co/u/x", "stream": False})
    assert r.status_code == 200
    assert r.json() == {"status": "success"}


async def test_error_mid_stream_is_an_error_line_under_200(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    fake_pull(app, fail_after=2, exc=PullError("connection reset"))
    r = await client.post("/api/pull", json={"model": "hf.co/u/x"})
    assert r.status_code == 200
    lines = ndjson(r.text)
    assert lines[:2] == EVENTS[:2]
    assert lines[-1] == {"error": "connection reset"}


async def test_error_before_any_progress_is_a_status(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    fake_pull(app, fail_after=0, exc=ModelNotFound("model 'x' not found"))
    r = await client.post("/api/pull", json={"model": "hf.co/u/x"})
    assert (r.status_code, r.json()) == (404, {"error": "model 'x' not found"})
    r = await client.post("/api/pull", json={"model": "hf.co/u/x", "stream": False})
    assert r.status_code == 404


async def test_error_without_stream_is_a_status(app: FastAPI, client: httpx.AsyncClient) -> None:
    fake_pull(app, fail_after=3, exc=PullError("hub said no", status=502))
    r = await client.post("/api/pull", json={"model": "hf.co/u/x", "stream": False})
    assert (r.status_code, r.json()) == (502, {"error": "hub said no"})


async def test_closing_the_stream_cancels_the_work() -> None:
    cancelled = threading.Event()

    def work(emit: Any, cancel: threading.Event) -> None:
        while not cancel.is_set():
            emit({"status": "tick"})
            time.sleep(0.01)
        cancelled.set()

    events = events_from_thread(work)
    assert await events.__anext__() == {"status": "tick"}
    await events.aclose()
    assert await asyncio.to_thread(cancelled.wait, 5)


async def test_work_errors_surface_after_earlier_events() -> None:
    def work(emit: Any, cancel: threading.Event) -> None:
        emit({"n": 1})
        raise PullError("boom")

    got = []
    with pytest.raises(PullError, match="boom"):
        async for event in events_from_thread(work):
            got.append(event)
    assert got == [{"n": 1}]


async def test_real_pull_from_the_hub_stand_in(client: httpx.AsyncClient, hub: HubStub) -> None:
    r = await client.post("/api/pull", json={"model": "hf.co/someone/Tiny-GGUF:q8_0"})
    assert r.status_code == 200
    lines = ndjson(r.text)
    assert "error" not in lines[-1], lines[-1]
    statuses = [line["status"] for line in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    layer = [line for line in lines if line.get("digest") and line.get("total")]
    assert layer and layer[-1]["completed"] == layer[-1]["total"]
    tags = (await client.get("/api/tags")).json()["models"]
    assert [m["name"] for m in tags] == ["hf.co/someone/Tiny-GGUF:q8_0"]
    show = (await client.post("/api/show", json={"model": "hf.co/someone/Tiny-GGUF:q8_0"})).json()
    assert show["details"]["quantization_level"] == "Q8_0"


async def test_pull_of_a_missing_repo(client: httpx.AsyncClient, hub: HubStub) -> None:
    r = await client.post("/api/pull", json={"model": "hf.co/someone/Nope", "stream": False})
    assert r.status_code == 404 and r.json()["error"]
    r = await client.post("/api/pull", json={"model": "hf.co/someone/Nope"})
    assert r.status_code == 200  # progress had started: Ollama reports it in the stream
    assert ndjson(r.text)[-1].keys() == {"error"}
