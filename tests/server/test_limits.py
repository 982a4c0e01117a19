"""Hostile request shapes: deep JSON, big bodies, copies over models — clean answers, no leaks."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter

from localllm.server.app import create_app
from localllm.server.deps import MAX_JSON_DEPTH, json_depth
from localllm.store.local import Store
from tests.support.fake_scheduler import fake_scheduler
from tests.support.live_server import live_server
from tests.support.models import add_model

pytestmark = pytest.mark.anyio


def _client(store: Store) -> httpx.AsyncClient:
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")


def test_json_depth_ignores_brackets_in_strings() -> None:
    assert json_depth(b'{"a": "[[[[{{{{"}', stop_after=2) == 1
    assert json_depth(b'[[["\\"[[[["]]]', stop_after=2) == 3
    assert json_depth(b"[" * 100_000, stop_after=MAX_JSON_DEPTH) == MAX_JSON_DEPTH + 1
    assert json_depth(b'{"x": [1, 2, {"y": []}]}', stop_after=1) == 2


async def test_deep_json_is_a_400_not_a_crash(store: Store) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    fmt = '{"type": "object", "properties": {"a": ' * 450 + "{}" + "}}" * 450
    async with _client(store) as c:
        for path in (
            "/api/show",
            "/api/generate",
            "/api/chat",
            "/v1/chat/completions",
            "/api/create",
            "/api/copy",
            "/api/delete",
        ):
            method = "DELETE" if path == "/api/delete" else "POST"
            r = await c.request(method, path, content=f'{{"model": "m", "x": {deep}}}')
            assert r.status_code == 400, (path, r.text)
            assert "nested deeper" in r.text
        body = f'{{"model": "m", "prompt": "hi", "format": {fmt}}}'
        r = await c.post("/api/generate", content=body)
        assert r.status_code == 400 and "nested deeper" in r.json()["error"]
        # At the limit it is parsed as usual (here: the model does not exist).
        ok = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
        r = await c.post("/api/show", content=f'{{"model": "m", "x": {ok}}}')
        assert r.status_code == 404, r.text


def test_connection_stays_usable_after_errors(store: Store) -> None:
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    with live_server(app) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            for body in (deep, b"{not json", b"", b'{"model": 5}', b'{"model": "nope"}'):
                conn.request(
                    "POST", "/api/show", body=body, headers={"Content-Type": "application/json"}
                )
                r = conn.getresponse()
                assert 400 <= r.status < 500, r.status
                assert "error" in json.loads(r.read())
                conn.request("GET", "/api/version")  # the same keep-alive connection
                r = conn.getresponse()
                assert r.status == 200
                r.read()
        finally:
            conn.close()


def test_connection_survives_a_crashing_route(store: Store) -> None:
    router = APIRouter()

    @router.get("/crash")
    def crash() -> None:
        raise RuntimeError("boom")

    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler(), routers=[router])
    with live_server(app) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            for _ in range(8):
                conn.request("GET", "/crash")
                r = conn.getresponse()
                assert r.status == 500 and "internal error" in json.loads(r.read())["error"]
                conn.request("GET", "/api/version")
                r = conn.getresponse()
                assert r.status == 200
                r.read()
        finally:
            conn.close()


async def test_max_body_is_the_only_body_limit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * (80 << 20)}]}
    payload = json.dumps(big).encode()
    monkeypatch.setenv("LOCALLLM_MAX_BODY", "314572800")
    async with _client(store) as c:
        r = await c.post("/api/chat", content=payload)
        assert r.status_code == 404, r.text[:200]  # read and parsed: the model is missing
    monkeypatch.setenv("LOCALLLM_MAX_BODY", "0")
    async with _client(store) as c:
        assert (await c.post("/api/chat", content=payload)).status_code == 404
    monkeypatch.setenv("LOCALLLM_MAX_BODY", "1MiB")
    async with _client(store) as c:
        r = await c.post("/api/chat", content=payload)
        assert r.status_code == 413 and "too large" in r.json()["error"]


def _blob_bytes(store: Store) -> int:
    return sum(p.stat().st_size for p in store.blobs.root.iterdir() if p.is_file())


async def test_copy_over_a_model_collects_its_blobs(store: Store, tmp_path: Path) -> None:
    add_model(store, tmp_path, "a:latest", system="model a")
    add_model(store, tmp_path, "b:latest", system="model b only", license_text="B license")
    async with _client(store) as c:
        r = await c.post("/api/copy", json={"source": "a:latest", "destination": "b:latest"})
        assert r.status_code == 200
        names = {m["name"] for m in (await c.get("/api/tags")).json()["models"]}
        assert names == {"a:latest", "b:latest"}
        for name in ("a:latest", "b:latest"):
            r = await c.request("DELETE", "/api/delete", json={"model": name})
            assert r.status_code == 200
    assert _blob_bytes(store) == 0
    assert list(store.blobs.root.iterdir()) == []
