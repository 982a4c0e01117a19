"""LoRA hot-swap end to end: models created as base + adapter share one loaded base.

The app runs with the real scheduler and real runner processes (ASGI transport,
so the test can read the scheduler's ``load_count``).  ``tuned-c`` and
``tuned-d`` are the tiny model plus a remap adapter (see
``tests/support/tinylora.py``): after "a" they say "cdef…z" and "def…z",
where the base says "bcd…z".
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm import paths
from localllm.server.app import create_app
from localllm.store.local import Store
from localllm.store.manifests import Manifest, Media
from localllm.store.names import parse_name
from tests.support.tinylora import make_remap_lora
from tests.support.tinymodel import LETTERS, make_tiny_model

pytestmark = pytest.mark.anyio

EXPECT = {"base": LETTERS[1:], "tuned-c": LETTERS[2:], "tuned-d": LETTERS[3:]}
GREEDY = {"temperature": 0, "seed": 1}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "4")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
    app = create_app(Store(paths.models()), bind_host="127.0.0.1")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as c:
        try:
            yield app, c
        finally:
            await app.state.scheduler.shutdown()


async def upload(c: httpx.AsyncClient, path: Path) -> str:
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    r = await c.post(f"/api/blobs/{digest}", content=path.read_bytes())
    assert r.status_code in (200, 201), r.text
    return digest


async def create(c: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await c.post("/api/create", json={**body, "stream": False})


async def make_models(c: httpx.AsyncClient, tmp_path: Path) -> None:
    model = await upload(c, make_tiny_model(tmp_path / "m"))
    # The bare prompt as the template, so /v1/completions (templated) says the greedy text.
    r = await create(
        c, {"model": "base", "files": {"tiny.gguf": model}, "template": "{{ .Prompt }}"}
    )
    assert r.status_code == 200, r.text
    for name, to in (("tuned-c", "c"), ("tuned-d", "d")):
        lora = await upload(c, make_remap_lora(tmp_path / "l", {"a": to}, name=f"{to}.gguf"))
        r = await create(c, {"model": name, "from": "base", "adapters": {f"{to}.gguf": lora}})
        assert r.status_code == 200, r.text


async def generate(c: httpx.AsyncClient, model: str, prompt: str = "a") -> httpx.Response:
    return await c.post(
        "/api/generate",
        json={"model": model, "prompt": prompt, "raw": True, "stream": False, "options": GREEDY},
    )


async def test_base_and_two_adapters_alternate_on_one_base_load(
    served: tuple[FastAPI, httpx.AsyncClient], tmp_path: Path
) -> None:
    app, c = served
    await make_models(c, tmp_path)
    sched = app.state.scheduler
    for _ in range(2):
        for name in ("base", "tuned-c", "base", "tuned-d", "tuned-c"):
            r = await generate(c, name)
            assert r.status_code == 200, r.text
            assert r.json()["response"] == EXPECT[name], name
    assert sched.load_count == 1
    (loaded,) = sched.loaded()
    # Each adapter file was loaded into the runner once, however often it was used.
    assert len(loaded.runner.adapter_loads) == 2

    # At the same time, in one runner: every answer is still its own model's.
    names = ["base", "tuned-c", "tuned-d"] * 3
    replies = await asyncio.gather(*(generate(c, n) for n in names))
    assert [r.json()["response"] for r in replies] == [EXPECT[n] for n in names]

    # /v1 picks the adapter by model name on the same path.
    for name in ("tuned-d", "base", "tuned-c"):
        r = await c.post("/v1/completions", json={"model": name, "prompt": "a", "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == EXPECT[name]
    assert sched.load_count == 1
    assert len(sched.loaded()) == 1


async def test_mismatched_adapter_refused_at_create_and_at_load(
    served: tuple[FastAPI, httpx.AsyncClient], tmp_path: Path
) -> None:
    app, c = served
    await make_models(c, tmp_path)
    bad_path = make_remap_lora(tmp_path / "bad", {"a": "c"}, name="wide.gguf", n_embd=128)
    bad = await upload(c, bad_path)
    r = await create(c, {"model": "wrong", "from": "base", "adapters": {"wide.gguf": bad}})
    assert r.status_code == 400
    assert 'ADAPTER "wide.gguf" does not fit the base model' in r.json()["error"]
    assert "output.weight" in r.json()["error"]

    # One that got into the store another way (an older daemon, a hand-made manifest)
    # is refused when a request needs it, without harming the loaded base.
    store: Store = app.state.inference.store
    good = store.get(parse_name("tuned-c")).manifest
    layers = [
        ly
        if ly.media_type != Media.ADAPTER
        else type(ly)(Media.ADAPTER, bad, bad_path.stat().st_size, "wide.gguf")
        for ly in good.layers
    ]
    store.commit(parse_name("sneaked"), Manifest(good.config, layers))
    assert (await generate(c, "base")).json()["response"] == EXPECT["base"]
    r = await generate(c, "sneaked")
    assert r.status_code == 400
    assert "does not fit this model" in r.json()["error"]
    assert "incorrect shape" in r.json()["error"]
    assert (await generate(c, "tuned-c")).json()["response"] == EXPECT["tuned-c"]
    assert app.state.scheduler.load_count == 1
