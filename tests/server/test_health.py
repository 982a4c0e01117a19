"""/health (liveness) and /health/ready: on the ASGI app, and on the real daemon under load."""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm.errors import RunnerCrashed
from localllm.runner.messages import LoadOptions
from localllm.scheduler.scheduler import ModelSpec, Scheduler
from localllm.server.app import create_app
from localllm.store.local import Store
from tests.support.daemon import Daemon
from tests.support.fake_scheduler import fake_scheduler
from tests.support.tinymodel import LOOP_PROMPT
from tests.support.variants import serve

pytestmark = pytest.mark.anyio


async def test_health_is_ok_and_needs_no_key(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_API_KEY", "k")
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as c:
        r = await c.get("/health")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert (await c.head("/health")).status_code == 200
        # Readiness says more about the daemon, so it is behind the key.
        assert (await c.get("/health/ready")).status_code == 401


async def test_ready_when_idle(client: httpx.AsyncClient) -> None:
    r = await client.get("/health/ready")
    assert r.status_code == 200 and r.json() == {"status": "ready"}


async def test_not_ready_while_draining_but_still_alive(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    app.state.lifecycle.begin_drain(30)
    r = await client.get("/health/ready")
    assert r.status_code == 503
    assert r.json()["reasons"] == ["server is shutting down"]
    assert (await client.get("/health")).status_code == 200


async def test_not_ready_when_queue_is_full(app: FastAPI, client: httpx.AsyncClient) -> None:
    sched = app.state.scheduler
    sched.pending = sched.max_queue
    try:
        r = await client.get("/health/ready")
    finally:
        sched.pending = 0
    assert r.status_code == 503
    assert r.json()["reasons"][0].startswith("request queue is full")


async def test_not_ready_when_store_unreadable(tmp_path: Path) -> None:
    # A file where the store folder should be: every model request would fail.
    root = tmp_path / "not-a-dir"
    root.write_text("x")
    app = create_app(Store(root), bind_host="127.0.0.1", scheduler=fake_scheduler())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as c:
        r = await c.get("/health/ready")
        assert r.status_code == 503
        assert r.json()["reasons"][0].startswith("model store is not readable")
        assert (await c.get("/health")).status_code == 200


async def test_fresh_store_that_does_not_exist_yet_is_ready(tmp_path: Path) -> None:
    app = create_app(
        Store(tmp_path / "nothing-yet"), bind_host="127.0.0.1", scheduler=fake_scheduler()
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as c:
        assert (await c.get("/health/ready")).status_code == 200


async def test_not_ready_when_the_store_disk_is_nearly_full(
    store: Store, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from localllm.server import health

    measured: list[Path] = []

    def fake_free(path: Path) -> tuple[Path, int]:
        measured.append(path)
        return Path("/srv/models"), 200 << 20

    monkeypatch.setattr(health, "free_space", fake_free)
    r = await client.get("/health/ready")  # default minimum: 1 GiB
    assert r.status_code == 503
    [reason] = r.json()["reasons"]
    assert reason.startswith("low disk space: 210 MB (209715200 bytes) free on /srv/models")
    assert "LOCALLLM_MIN_FREE_DISK" in reason and measured == [store.root]
    monkeypatch.setenv("LOCALLLM_MIN_FREE_DISK", "100MiB")
    assert (await client.get("/health/ready")).status_code == 200
    monkeypatch.setenv("LOCALLLM_MIN_FREE_DISK", "0")  # 0 turns the check off
    assert (await client.get("/health/ready")).status_code == 200
    assert len(measured) == 2


async def test_min_free_disk_above_the_real_free_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No fakes: a minimum no disk has; the store does not exist yet, so its
    # nearest existing parent is measured (and nothing is created).
    monkeypatch.setenv("LOCALLLM_MIN_FREE_DISK", "1000000TiB")
    root = tmp_path / "models"
    app = create_app(Store(root), bind_host="127.0.0.1", scheduler=fake_scheduler())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as c:
        r = await c.get("/health/ready")
    assert r.status_code == 503
    [reason] = r.json()["reasons"]
    assert reason.startswith("low disk space: ") and f"free on {tmp_path}," in reason
    assert not root.exists()


# -- the real daemon -------------------------------------------------------------------


@pytest.fixture
def long_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    with serve(tmp_path, monkeypatch, parallel=2, ctx=4096, names=("tiny-long",)) as d:
        yield d


def _probe(client: httpx.Client) -> float:
    t0 = time.monotonic()
    r = client.get("/health")
    assert r.status_code == 200
    return time.monotonic() - t0


def test_health_answers_while_loading_and_generating(long_daemon: Daemon) -> None:
    url = long_daemon.url
    body = {
        "model": "tiny-long",
        "prompt": LOOP_PROMPT,
        "raw": True,
        "stream": True,
        "options": {"temperature": 0, "num_predict": 100},
    }
    during_load: list[float] = []
    during_stream: list[float] = []
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        httpx.Client(timeout=60, trust_env=False) as client,
        httpx.Client(base_url=url, timeout=5, trust_env=False) as prober,
    ):
        _probe(prober)  # connect first: time the daemon, not the client's setup

        def first_line() -> dict[str, object]:
            # Holds the stream open; returns the first line (sent once the model is loaded).
            ctx = client.stream("POST", url + "/api/generate", json=body)
            lines = ctx.__enter__().iter_lines()
            streams.append((ctx, lines))
            return dict(json.loads(next(lines)))

        streams: list[tuple[Any, Iterator[str]]] = []
        fut = pool.submit(first_line)
        while not fut.done():
            during_load.append(_probe(prober))
        assert fut.result()["done"] is False
        for _ in range(5):
            during_stream.append(_probe(prober))
        ctx, rest = streams[0]
        lines = [json.loads(line) for line in rest if line]
        ctx.__exit__(None, None, None)
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 100
    # The load took long enough to probe several times, and no probe waited on it.
    assert len(during_load) >= 2
    assert max(during_load + during_stream) < 0.5, (during_load, during_stream)


async def test_not_ready_naming_a_model_whose_runner_died_until_it_loads_again(
    store: Store,
) -> None:
    sched = fake_scheduler()
    app = create_app(store, bind_host="127.0.0.1", scheduler=sched)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as client:
        await _died_then_loaded(sched, client)


async def _died_then_loaded(sched: Scheduler, client: httpx.AsyncClient) -> None:
    spec = ModelSpec(name="m:latest", key="/blobs/m", model_paths=("/blobs/m",))
    with pytest.raises(RunnerCrashed, match=r"^m:latest: model runner stopped responding"):
        async with sched.use(spec, LoadOptions(), 60) as model:
            model.runner.closed = True  # what the watchdog's kill looks like from here
            raise RunnerCrashed("model runner stopped responding (no sign of life for 2.0s)")
    r = await client.get("/health/ready")
    assert r.status_code == 503
    assert r.json()["reasons"] == [
        "model m:latest failed: model runner stopped responding (no sign of life for 2.0s)"
    ]
    async with sched.use(spec, LoadOptions(), 60) as model:  # loads afresh
        pass
    assert (await client.get("/health/ready")).status_code == 200
    # An idle runner that dies (no request sees it) counts too.
    model.runner.closed = True
    r = await client.get("/health/ready")
    assert r.status_code == 503 and r.json()["reasons"][0].startswith("model m:latest failed")
    await sched.unload(spec.key)  # unloading is not a way to hide it: only a load is
    assert (await client.get("/health/ready")).status_code == 503
    async with sched.use(spec, LoadOptions(), 0):
        pass
    assert (await client.get("/health/ready")).status_code == 200
