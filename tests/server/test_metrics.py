"""/metrics: Prometheus text that parses, counters that move with requests, one registry per app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from localllm.server.app import create_app
from localllm.store.local import Store
from tests.support.daemon import Daemon
from tests.support.fake_scheduler import fake_scheduler
from tests.support.models import add_model
from tests.support.tinymodel import GREEDY
from tests.support.variants import GREEDY_OPTS, serve

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value, 0 when absent (a counter not yet incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


@pytest.fixture
def fake_app(store: Store) -> FastAPI:
    return create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())


async def scrape(c: httpx.AsyncClient) -> Samples:
    r = await c.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    return parse(r.text)


async def test_requests_by_endpoint_and_status(fake_app: FastAPI) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=fake_app), base_url="http://localhost"
    ) as c:
        before = await scrape(c)
        assert (
            value(
                before,
                "localllm_http_requests_total",
                method="GET",
                endpoint="/api/tags",
                status="200",
            )
            == 0
        )
        for _ in range(3):
            await c.get("/api/tags")
        await c.post("/api/show", json={"model": "missing"})
        await c.get("/no/such/path/12345")
        after = await scrape(c)
    assert (
        value(
            after, "localllm_http_requests_total", method="GET", endpoint="/api/tags", status="200"
        )
        == 3
    )
    assert (
        value(
            after, "localllm_http_requests_total", method="POST", endpoint="/api/show", status="404"
        )
        == 1
    )
    # Unknown URLs share one label: a scanner cannot grow the series without bound.
    assert (
        value(
            after, "localllm_http_requests_total", method="GET", endpoint="unmatched", status="404"
        )
        == 1
    )
    assert value(after, "localllm_http_request_duration_seconds_count", endpoint="/api/tags") == 3
    assert value(after, "localllm_queue_depth") == 0
    assert value(after, "localllm_queue_capacity") == 512


async def test_generation_metrics_and_loaded_models(
    fake_app: FastAPI, store: Store, tmp_path: Path
) -> None:
    add_model(store, tmp_path, "m:latest")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=fake_app), base_url="http://localhost"
    ) as c:
        r = await c.post(
            "/api/generate",
            json={"model": "m", "prompt": "hey", "stream": False, "options": {"num_predict": 5}},
        )
        assert r.status_code == 200, r.text
        s = await scrape(c)
    model = {"model": "m:latest"}
    assert value(s, "localllm_generated_tokens_total", **model) == 5
    assert value(s, "localllm_prompt_tokens_total", **model) > 0
    assert value(s, "localllm_time_to_first_token_seconds_count", **model) == 1
    assert value(s, "localllm_inter_token_latency_seconds_count", **model) == 4
    assert value(s, "localllm_generation_duration_seconds_count", **model) == 1
    assert value(s, "localllm_loaded_models") == 1
    assert total(s, "localllm_model_memory_bytes", **model) == 1024
    assert value(s, "localllm_model_active_requests", **model) == 0


async def test_each_app_has_its_own_registry(store: Store) -> None:
    apps = [create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler()) for _ in range(2)]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=apps[0]), base_url="http://localhost"
    ) as c:
        await c.get("/api/version")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=apps[1]), base_url="http://localhost"
    ) as c:
        s = await scrape(c)
    assert (
        value(
            s, "localllm_http_requests_total", method="GET", endpoint="/api/version", status="200"
        )
        == 0
    )


async def test_metrics_need_the_key(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_API_KEY", "secret")
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as c:
        assert (await c.get("/metrics")).status_code == 401
        r = await c.get("/metrics", headers={"Authorization": "Bearer secret"})
        assert r.status_code == 200
    # The refusal itself was counted (before routing, so under "unmatched").
    assert (
        value(
            parse(r.text),
            "localllm_http_requests_total",
            method="GET",
            endpoint="unmatched",
            status="401",
        )
        == 1
    )


# -- the real daemon -------------------------------------------------------------------


@pytest.fixture
def plain_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    with serve(tmp_path, monkeypatch, parallel=2, names=("tiny-plain",)) as d:
        yield d


def test_counters_move_with_real_requests(plain_daemon: Daemon) -> None:
    with httpx.Client(base_url=plain_daemon.url, timeout=60, trust_env=False) as c:
        before = parse(c.get("/metrics").text)
        r = c.post(
            "/api/generate",
            json={
                "model": "tiny-plain",
                "prompt": "hello",
                "stream": False,
                "options": GREEDY_OPTS,
            },
        )
        assert r.json()["response"] == GREEDY["hello"]
        r = c.post(
            "/v1/chat/completions",
            json={
                "model": "tiny-plain",
                "messages": [{"role": "user", "content": "x"}],
                "temperature": 0,
                "stream": True,
            },
        )
        assert r.status_code == 200 and "[DONE]" in r.text
        c.post("/api/generate", json={"model": "nope", "prompt": "a"})
        after = parse(c.get("/metrics").text)
    model = {"model": "tiny-plain:latest"}
    generated = len(GREEDY["hello"]) + len(GREEDY["x"])  # one token per letter
    assert value(before, "localllm_generated_tokens_total", **model) == 0
    assert value(after, "localllm_generated_tokens_total", **model) == generated
    assert value(after, "localllm_prompt_tokens_total", **model) >= 2
    assert value(after, "localllm_time_to_first_token_seconds_count", **model) == 2
    assert value(after, "localllm_inter_token_latency_seconds_count", **model) == generated - 2
    assert value(after, "localllm_generation_duration_seconds_count", **model) == 2
    assert (
        value(
            after,
            "localllm_http_requests_total",
            method="POST",
            endpoint="/api/generate",
            status="200",
        )
        == 1
    )
    assert (
        value(
            after,
            "localllm_http_requests_total",
            method="POST",
            endpoint="/api/generate",
            status="404",
        )
        == 1
    )
    assert (
        value(
            after,
            "localllm_http_requests_total",
            method="POST",
            endpoint="/v1/chat/completions",
            status="200",
        )
        == 1
    )
    assert value(after, "localllm_loaded_models") == 1
    assert total(after, "localllm_model_memory_bytes", **model) > 0
    assert value(after, "localllm_queue_depth") == 0
