"""Graceful shutdown of the real daemon: drain on SIGTERM, force on a second signal, no orphans.

Runner processes are found by scanning ``/proc`` for ``localllm.runner``
children of the test's daemon; once the daemon is gone they are followed by
pid (an exited child of a dead parent may linger as a zombie until its new
parent reaps it: that counts as gone).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.procs import runner_pids
from tests.support.tinymodel import LOOP_PROMPT
from tests.support.variants import serve


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if running(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def wait_draining(url: str, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(url + "/health/ready", trust_env=False).status_code == 503:
            return
        time.sleep(0.02)
    raise AssertionError("the daemon did not start draining")


@pytest.fixture
def long_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Daemon]:
    grace = getattr(request, "param", "30")
    with serve(
        tmp_path,
        monkeypatch,
        parallel=2,
        ctx=16384,
        names=("tiny-long",),
        LOCALLLM_SHUTDOWN_GRACE=grace,
    ) as d:
        yield d


def open_stream(stack: ExitStack, url: str, num_predict: int) -> Iterator[str]:
    """Start a generation of ``num_predict`` tokens of the never-ending prompt."""
    client = stack.enter_context(httpx.Client(timeout=60, trust_env=False))
    body = {
        "model": "tiny-long",
        "prompt": LOOP_PROMPT,
        "raw": True,
        "options": {"temperature": 0, "num_predict": num_predict},
    }
    resp = stack.enter_context(client.stream("POST", url + "/api/generate", json=body))
    assert resp.status_code == 200
    lines = resp.iter_lines()
    assert json.loads(next(lines))["done"] is False  # the model is loaded and generating
    return lines


def read_rest(lines: Iterator[str]) -> list[dict[str, Any]]:
    out = []
    try:
        for line in lines:
            if line:
                out.append(json.loads(line))
    except httpx.HTTPError:
        pass  # the daemon cut the stream
    return out


def test_sigterm_lets_the_stream_finish_then_exits_0(long_daemon: Daemon) -> None:
    d = long_daemon
    with ExitStack() as stack:
        # Long enough to outlast the checks below: prompt lookup drafts this looping text
        # several tokens a step, and 2,000 tokens were once done before the third request.
        lines = open_stream(stack, d.url, 8000)
        runners = runner_pids(d.proc.pid)
        assert len(runners) == 1
        d.proc.send_signal(signal.SIGTERM)
        wait_draining(d.url)
        # New work is refused with a clear message; probes still answer.
        r = httpx.post(
            d.url + "/api/generate", json={"model": "tiny-long", "prompt": "a"}, trust_env=False
        )
        assert r.status_code == 503 and r.json() == {"error": "server is shutting down"}
        r = httpx.post(d.url + "/v1/chat/completions", json={}, trust_env=False)
        assert r.status_code == 503
        assert r.json()["error"]["message"] == "server is shutting down"
        assert httpx.get(d.url + "/health", trust_env=False).status_code == 200
        rest = read_rest(lines)
    assert rest[-1]["done"] is True
    assert rest[-1]["done_reason"] == "length" and rest[-1]["eval_count"] == 8000
    assert d.proc.wait(20) == 0
    assert wait_gone(runners, 5) == []
    assert "shutting down" in d.log.read_text()


# The tiny model decodes several thousand tokens a second on a quiet machine: the
# stream must be far longer than the grace period (16000 tokens vs 0.3 s).
@pytest.mark.parametrize("long_daemon", ["0.3"], indirect=True)
def test_grace_period_ends_a_stream_that_would_not_finish(long_daemon: Daemon) -> None:
    d = long_daemon
    with ExitStack() as stack:
        lines = open_stream(stack, d.url, 16000)
        runners = runner_pids(d.proc.pid)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        rest = read_rest(lines)
    assert not rest or rest[-1].get("done_reason") != "length"
    assert d.proc.wait(15) == 0
    assert time.monotonic() - t0 < 10
    assert wait_gone(runners, 5) == []


def test_second_signal_exits_at_once(long_daemon: Daemon) -> None:
    d = long_daemon
    with ExitStack() as stack:
        # Keep the stream referenced: a dropped iterator closes the connection, and a
        # daemon that sees its only client leave has nothing left to drain.
        lines = open_stream(stack, d.url, 4000)
        runners = runner_pids(d.proc.pid)
        d.proc.send_signal(signal.SIGTERM)
        wait_draining(d.url)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGINT)
        code = d.proc.wait(5)
        assert time.monotonic() - t0 < 2
        del lines
    assert code == 128 + signal.SIGINT
    assert wait_gone(runners, 5) == []


def test_sigkill_of_the_daemon_leaves_no_runner(long_daemon: Daemon) -> None:
    d = long_daemon
    with ExitStack() as stack:
        open_stream(stack, d.url, 4000)  # the runner is busy generating when its parent dies
        runners = runner_pids(d.proc.pid)
        assert len(runners) == 1
        d.proc.kill()
        d.proc.wait(5)
    # The runner sees its stdin close and exits by itself (within its 2 s deadline).
    assert wait_gone(runners, 8) == []
