"""The daemon under stress: keep-alive, a full queue, disconnects, a killed runner, concurrency."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from tests.support import procs
from tests.support.daemon import Daemon
from tests.support.tinymodel import GREEDY, LOOP_PROMPT
from tests.support.variants import GREEDY_OPTS, serve, serve_shared

LONG_CTX = 16384  # the never-ending prompt takes seconds to fill this
LOOP = {"model": "tiny-long", "prompt": LOOP_PROMPT, "raw": True, "options": {"temperature": 0}}


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One slot, a queue of one, and a model with a long context for the loop prompt."""
    with serve_shared(
        tmp_path_factory, parallel=1, ctx=LONG_CTX, names=("tiny-long",), LOCALLLM_MAX_QUEUE="1"
    ) as d:
        yield d


def post(d: Daemon, path: str, body: object, timeout: float = 60) -> httpx.Response:
    return httpx.post(d.url + path, json=body, timeout=timeout, trust_env=False)


def ps_names(d: Daemon) -> list[str]:
    return [m["name"] for m in httpx.get(d.url + "/api/ps", trust_env=False).json()["models"]]


def runner_pids(d: Daemon) -> list[int]:
    return procs.runner_pids(d.proc.pid)


def test_keep_alive_expiry_and_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(tmp_path, monkeypatch, names=("tiny",)) as d:
        r = post(
            d,
            "/api/generate",
            {"model": "tiny", "prompt": "x", "raw": True, "stream": False, "keep_alive": 1},
        )
        assert r.json()["response"] == "yz"
        start = time.monotonic()
        assert ps_names(d) == ["tiny:latest"]
        while ps_names(d) and time.monotonic() - start < 10:
            time.sleep(0.1)
        gone = time.monotonic() - start
        assert ps_names(d) == [] and 0.5 < gone < 10, gone
        r = post(
            d,
            "/api/chat",
            {
                "model": "tiny",
                "stream": False,
                "keep_alive": 0,
                "messages": [{"role": "user", "content": "a"}],
            },
        )
        assert r.status_code == 200 and r.json()["done_reason"] == "stop"
        assert ps_names(d) == []  # unloaded as soon as the request ended
        r = post(d, "/api/generate", {"model": "tiny", "keep_alive": "-1s", "stream": False})
        assert r.json()["done_reason"] == "load"
        ps = httpx.get(d.url + "/api/ps", trust_env=False).json()["models"]
        assert ps[0]["expires_at"].startswith("2318")  # negative: kept forever


def test_queue_full_is_503_and_disconnect_frees_the_slot(one_slot: Daemon) -> None:
    d = one_slot
    with (
        httpx.Client(trust_env=False, timeout=60) as holder,
        holder.stream("POST", d.url + "/api/generate", json=LOOP) as hold,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        lines = hold.iter_lines()
        assert json.loads(next(lines))["response"] == "A"  # the slot is taken
        waiting = [
            pool.submit(
                post,
                d,
                "/api/generate",
                {
                    "model": "tiny-long",
                    "prompt": p,
                    "raw": True,
                    "stream": False,
                    "options": GREEDY_OPTS,
                },
            )
            for p in ("a", "x")
        ]
        # One of the two waits for the slot; the other finds the queue (of one) full.
        done, _ = concurrent.futures.wait(
            waiting, timeout=10, return_when=concurrent.futures.FIRST_COMPLETED
        )
        (rejected,) = done
        assert rejected.result().status_code == 503
        assert "server busy" in rejected.result().json()["error"]
        r = post(
            d,
            "/v1/chat/completions",
            {"model": "tiny-long", "messages": [{"role": "user", "content": "a"}]},
        )
        assert r.status_code == 503 and r.json()["error"]["type"] == "api_error"
        for _ in range(3):
            next(lines)
        hold.close()  # the client goes away mid-stream
        start = time.monotonic()
        (queued,) = [f for f in waiting if f is not rejected]
        r = queued.result(timeout=10)
        assert r.status_code == 200
        assert r.json()["response"] in (GREEDY["a"], GREEDY["x"])
        assert time.monotonic() - start < 10  # the loop alone would run for minutes
    # A fresh request on the only slot finishes at once too.
    r = post(
        d,
        "/api/generate",
        {"model": "tiny-long", "prompt": "5", "raw": True, "stream": False, "options": GREEDY_OPTS},
        timeout=5,
    )
    assert r.json()["response"] == GREEDY["5"]


def test_sse_disconnect_frees_the_slot(one_slot: Daemon) -> None:
    d = one_slot
    c = d.keep(
        openai.OpenAI(
            base_url=d.url + "/v1",
            api_key="k",
            max_retries=0,
            http_client=httpx.Client(trust_env=False, timeout=60),
        )
    )
    stream = c.completions.create(model="tiny-long", prompt=LOOP_PROMPT, temperature=0, stream=True)
    it = iter(stream)
    for _ in range(3):
        next(it)
    stream.close()
    start = time.monotonic()
    r = post(
        d,
        "/api/generate",
        {"model": "tiny-long", "prompt": "x", "raw": True, "stream": False, "options": GREEDY_OPTS},
        timeout=10,
    )
    assert r.json()["response"] == "yz" and time.monotonic() - start < 10
    # n=2 on one slot: one choice runs, the other waits; leaving must cancel both.
    with httpx.stream(
        "POST",
        d.url + "/v1/chat/completions",
        timeout=60,
        trust_env=False,
        json={
            "model": "tiny-long",
            "n": 2,
            "stream": True,
            "temperature": 0,
            "messages": [{"role": "user", "content": LOOP_PROMPT}],
        },
    ) as s:
        frames = (f for f in s.iter_lines() if f)
        indexes = {json.loads(next(frames)[6:])["choices"][0]["index"] for _ in range(6)}
    assert len(indexes) == 1  # only one choice had the slot
    start = time.monotonic()
    r = post(
        d,
        "/api/generate",
        {"model": "tiny-long", "prompt": "x", "raw": True, "stream": False, "options": GREEDY_OPTS},
        timeout=10,
    )
    assert r.json()["response"] == "yz" and time.monotonic() - start < 10


def test_killed_runner_is_an_error_then_the_next_request_works(one_slot: Daemon) -> None:
    d = one_slot
    with httpx.stream("POST", d.url + "/api/generate", json=LOOP, timeout=60, trust_env=False) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines))["response"] == "A"
        (pid,) = runner_pids(d)
        os.kill(pid, signal.SIGKILL)
        rest = [json.loads(line) for line in lines if line]
    assert r.status_code == 200
    assert "error" in rest[-1] and not rest[-1].get("done"), rest[-3:]
    r = post(
        d,
        "/api/generate",
        {"model": "tiny-long", "prompt": "a", "raw": True, "stream": False, "options": GREEDY_OPTS},
    )
    assert r.status_code == 200 and r.json()["response"] == GREEDY["a"]
    (fresh,) = runner_pids(d)
    assert fresh != pid
    # The same through the OpenAI stream: an error event, and no [DONE].
    with httpx.stream(
        "POST",
        d.url + "/v1/completions",
        timeout=60,
        trust_env=False,
        json={"model": "tiny-long", "prompt": LOOP_PROMPT, "temperature": 0, "stream": True},
    ) as r:
        frames = r.iter_lines()
        assert next(frames).startswith("data: ")
        os.kill(fresh, signal.SIGKILL)
        tail = [f for f in frames if f]
    assert tail[-1] != "data: [DONE]"
    assert json.loads(tail[-1][6:])["error"]["type"] == "api_error"
    r = post(d, "/v1/completions", {"model": "tiny-long", "prompt": "x", "temperature": 0})
    assert r.json()["choices"][0]["text"] == "yz"


def test_eight_concurrent_streams_through_both_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = ["a", "x", "hello", "0", "5", ".", "a", "hello"]

    async def run(d: Daemon) -> list[str]:
        oc = ollama.AsyncClient(host=d.url, trust_env=False, timeout=60)
        ac = openai.AsyncOpenAI(
            base_url=d.url + "/v1",
            api_key="k",
            max_retries=0,
            http_client=httpx.AsyncClient(trust_env=False, timeout=60),
        )

        async def native(p: str) -> str:
            parts = await oc.generate(
                model="tiny", prompt=p, raw=True, stream=True, options=GREEDY_OPTS
            )
            return "".join([x.response async for x in parts])

        async def compat(p: str) -> str:
            stream = await ac.chat.completions.create(
                model="tiny-plain",
                messages=[{"role": "user", "content": p}],
                stream=True,
                temperature=0,
            )
            return "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])

        jobs = [native(p) if i % 2 else compat(p) for i, p in enumerate(prompts)]
        try:
            return list(await asyncio.wait_for(asyncio.gather(*jobs), 60))
        finally:
            await ac.close()
            await oc.close()

    with serve(tmp_path, monkeypatch, names=("tiny", "tiny-plain")) as d:
        assert asyncio.run(run(d)) == [GREEDY[p] for p in prompts]
