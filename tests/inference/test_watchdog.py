"""The runner watchdog in the real daemon: a stopped runner (SIGSTOP: what a native
deadlock or a hung GPU driver looks like from outside) is killed within
LOCALLLM_RUNNER_TIMEOUT, its stream ends with an error naming the model,
/health/ready names it until it loads again, and unloading a stopped runner is prompt."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import procs
from tests.support.daemon import Daemon
from tests.support.tinymodel import GREEDY, LOOP_PROMPT
from tests.support.variants import GREEDY_OPTS, serve

BOUND = 1.5  # LOCALLLM_RUNNER_TIMEOUT here
SLACK = 2.0  # the watchdog's wake-up, the kill, the error's way out; a busy 2-core machine
LOOP = {"model": "tiny-long", "prompt": LOOP_PROMPT, "raw": True, "options": {"temperature": 0}}


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    with serve(
        tmp_path,
        monkeypatch,
        parallel=1,
        ctx=16384,
        names=("tiny-long",),
        LOCALLLM_RUNNER_TIMEOUT=str(BOUND),
    ) as d:
        stopped: list[int] = []
        d.stopped = stopped  # type: ignore[attr-defined]
        try:
            yield d
        finally:
            # Without the watchdog a stopped runner would outlive the test: end it.
            for pid in stopped:
                if pid in procs.runner_pids(d.proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def stop(d: Daemon) -> int:
    (pid,) = procs.runner_pids(d.proc.pid)
    d.stopped.append(pid)  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGSTOP)
    return pid


def ready(d: Daemon) -> httpx.Response:
    return httpx.get(d.url + "/health/ready", timeout=10, trust_env=False)


def test_stopped_runner_mid_stream_errors_naming_the_model_then_reloads(daemon: Daemon) -> None:
    d = daemon
    # A read timeout well past the bound: without the watchdog the stream hangs.
    with httpx.stream(
        "POST",
        d.url + "/api/generate",
        json=LOOP,
        trust_env=False,
        timeout=httpx.Timeout(10, read=BOUND + SLACK + 5),
    ) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines))["response"] == "A"
        pid = stop(d)
        t0 = time.monotonic()
        rest = [json.loads(line) for line in lines if line]
        took = time.monotonic() - t0
    assert BOUND <= took < BOUND + SLACK, took
    error = rest[-1].get("error", "")
    assert "tiny-long" in error and "stopped responding" in error, rest[-1]
    assert pid not in procs.runner_pids(d.proc.pid)
    r = ready(d)
    assert r.status_code == 503
    (reason,) = r.json()["reasons"]
    assert reason.startswith("model tiny-long:latest failed: model runner stopped responding")
    r = httpx.post(
        d.url + "/api/generate",
        timeout=60,
        trust_env=False,
        json={
            "model": "tiny-long",
            "prompt": "a",
            "raw": True,
            "stream": False,
            "options": GREEDY_OPTS,
        },
    )
    assert r.status_code == 200 and r.json()["response"] == GREEDY["a"]
    assert ready(d).status_code == 200


def test_keep_alive_zero_unloads_a_stopped_idle_runner_promptly(daemon: Daemon) -> None:
    d = daemon
    r = httpx.post(
        d.url + "/api/generate",
        timeout=60,
        trust_env=False,
        json={
            "model": "tiny-long",
            "prompt": "x",
            "raw": True,
            "stream": False,
            "keep_alive": -1,
            "options": GREEDY_OPTS,
        },
    )
    assert r.json()["response"] == "yz"
    pid = stop(d)
    t0 = time.monotonic()
    r = httpx.post(
        d.url + "/api/generate",
        json={"model": "tiny-long", "keep_alive": 0},
        timeout=30,
        trust_env=False,
    )
    took = time.monotonic() - t0
    assert r.status_code == 200
    # A stopped runner misses a few beats (0.75 s here) and is killed, instead of
    # waiting out the 5 s grace and then a SIGTERM it cannot receive (7 s).
    assert took < 4, took
    assert pid not in procs.runner_pids(d.proc.pid)
    assert httpx.get(d.url + "/api/ps", trust_env=False).json()["models"] == []
