"""Per-model slots on the real daemon: ``PARAMETER num_parallel`` bounds concurrency, ps shows it.

``tiny-long`` loops on ``LOOP_PROMPT`` for the whole context, so a stream holds
its slot until the client closes it.  No timings are asserted: the test waits
(with a deadline) for states the daemon reports.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.tinymodel import LOOP_PROMPT
from tests.support.variants import serve

CTX = 32768


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    # LOCALLLM_NUM_PARALLEL 4: the model's PARAMETER must win over the setting.
    with serve(tmp_path, monkeypatch, parallel=4, ctx=CTX, names=("tiny-long",)) as d:
        yield d


def _queue_depth(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    m = re.search(r"^localllm_queue_depth (\S+)$", text, re.M)
    assert m, text
    return float(m.group(1))


def _open(stack: ExitStack, client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Start a stream, keep it open in ``stack``; return its first line (a slot is held)."""
    resp = stack.enter_context(client.stream("POST", "/api/generate", json=body))
    assert resp.status_code == 200
    lines = resp.iter_lines()
    stack.callback(lines.close)  # unread: dropping it now would close the response
    return dict(json.loads(next(lines)))


def test_two_slots_serve_two_streams_and_the_third_waits(daemon: Daemon) -> None:
    d = daemon
    with httpx.Client(base_url=d.url, timeout=120, trust_env=False) as client:
        r = client.post(
            "/api/create",
            json={
                "model": "duo",
                "from": "tiny-long",
                "parameters": {"num_parallel": 2},
                "stream": False,
            },
        )
        assert r.json() == {"status": "success"}, r.text
        shown = client.post("/api/show", json={"model": "duo"}).json()
        assert "PARAMETER num_parallel 2" in shown["modelfile"]

    body = {
        "model": "duo",
        "prompt": LOOP_PROMPT,
        "raw": True,
        "stream": True,
        "options": {"temperature": 0, "num_predict": CTX - 16},
    }
    with ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(1) as pool:
        streams = [
            stack.enter_context(httpx.Client(base_url=d.url, timeout=120, trust_env=False))
            for _ in range(3)
        ]
        probe = stack.enter_context(httpx.Client(base_url=d.url, timeout=30, trust_env=False))
        first = [stack.enter_context(ExitStack()) for _ in range(3)]
        # Two streams generate at once: both have sent a token.
        assert _open(first[0], streams[0], body)["done"] is False
        assert _open(first[1], streams[1], body)["done"] is False
        third = pool.submit(_open, first[2], streams[2], body)
        deadline = time.monotonic() + 60
        while _queue_depth(probe) < 1:
            assert time.monotonic() < deadline, "the third request never queued"
            assert not third.done(), third.result()
            time.sleep(0.05)
        assert not third.done()  # it waits for a slot

        (entry,) = [m for m in probe.get("/api/ps").json()["models"] if m["name"] == "duo:latest"]
        assert entry["num_parallel"] == 2 and entry["context_length"] == CTX
        out = d.cli("ps")
        assert out.returncode == 0, out.stderr
        header, *rows = out.stdout.splitlines()
        (row,) = [re.split(r" {4,}", r.strip()) for r in rows if r.startswith("duo:latest")]
        assert row[header.split().index("SLOTS")] == "2"

        first[0].close()  # the client goes away: its slot frees, the third gets it
        assert third.result(timeout=60)["done"] is False
        assert not third.exception()
