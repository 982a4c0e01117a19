"""A client that disconnects cancels its generation and frees its slot, at once.

The real daemon with one slot and a queue of one serves ``tiny-long``, whose
``LOOP_PROMPT`` generation never ends by itself (the 16k context takes
minutes), so a generation left running would keep the only slot.  Each test
abandons a request (a raw socket closed, or an httpx stream closed) and then
times a probe request on the one slot: it must be answered within about one
second of the disconnect plus its own latency.  A request abandoned while it
waits for the slot must also leave the queue of one, or the next request
finds it full (503).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.tinymodel import LOOP_PROMPT
from tests.support.variants import GREEDY_OPTS, serve_shared

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

LONG_CTX = 16384
SLACK_S = 1.0  # the disconnect must free the slot within this, beyond the probe's own time
GEN_LOOP = {"model": "tiny-long", "prompt": LOOP_PROMPT, "raw": True, "options": {"temperature": 0}}
CHAT_LOOP = {
    "model": "tiny-long",
    "messages": [{"role": "user", "content": LOOP_PROMPT}],
    "options": {"temperature": 0},
}
V1_CHAT_LOOP = {
    "model": "tiny-long",
    "temperature": 0,
    "messages": [{"role": "user", "content": LOOP_PROMPT}],
}
PROBE = {"model": "tiny-long", "prompt": "x", "raw": True, "stream": False, "options": GREEDY_OPTS}


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serve_shared(
        tmp_path_factory, parallel=1, ctx=LONG_CTX, names=("tiny-long",), LOCALLLM_MAX_QUEUE="1"
    ) as d:
        yield d


def probe(d: Daemon, timeout: float = 10) -> float:
    """Seconds for a short request on the one slot (which must be free, or soon)."""
    start = time.monotonic()
    r = httpx.post(d.url + "/api/generate", json=PROBE, timeout=timeout, trust_env=False)
    assert r.status_code == 200 and r.json()["response"] == "yz", r.text
    return time.monotonic() - start


def warm_probe(d: Daemon) -> float:
    """A probe's own latency, once the model is loaded."""
    probe(d)
    return probe(d)


def send_raw(d: Daemon, path: str, body: dict[str, Any]) -> socket.socket:
    """Send a request on a raw socket and leave the answer unread."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{d.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def read_some(sock: socket.socket, marker: bytes, count: int) -> None:
    """Read until ``marker`` was seen ``count`` times (tokens are arriving)."""
    seen = b""
    while seen.count(marker) < count:
        chunk = sock.recv(4096)
        assert chunk, seen
        seen += chunk


def abandon_and_probe(d: Daemon, sock: socket.socket, base: float, path: str) -> float:
    """Close ``sock``; return how long after that the slot served a probe, less its latency."""
    sock.close()
    gone = time.monotonic()
    probe(d)
    freed = time.monotonic() - gone - base
    print(f"{path}: slot free {freed:.3f}s after the disconnect (probe alone {base:.3f}s)")
    assert freed < SLACK_S
    return freed


def access_log(d: Daemon) -> str:
    return d.log.read_text(errors="replace")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/generate", GEN_LOOP),
        ("/api/chat", CHAT_LOOP),
        ("/v1/chat/completions", V1_CHAT_LOOP),
        ("/v1/completions", {"model": "tiny-long", "prompt": LOOP_PROMPT, "temperature": 0}),
        ("/v1/chat/completions", {**V1_CHAT_LOOP, "n": 2}),
    ],
)
def test_non_stream_disconnect_cancels(one_slot: Daemon, path: str, body: dict[str, Any]) -> None:
    d = one_slot
    base = warm_probe(d)
    sock = send_raw(d, path, {**body, "stream": False})
    time.sleep(0.5)  # it holds the slot and generates; nothing is sent until the end
    abandon_and_probe(d, sock, base, path)
    assert f"POST {path} 499 " in access_log(d)  # the abandoned request was answered so


@contextmanager
def hold_slot(d: Daemon) -> Iterator[None]:
    """A streaming loop generation that holds the only slot inside the block."""
    with httpx.stream(
        "POST", d.url + "/api/generate", json=GEN_LOOP, timeout=60, trust_env=False
    ) as r:
        lines = r.iter_lines()  # kept: dropping the iterator would close the stream
        assert json.loads(next(lines))["response"] == "A"
        yield


def queue_frees(d: Daemon) -> float:
    """Seconds until a request is queued (accepted) rather than refused as busy."""
    start = time.monotonic()
    while time.monotonic() - start < 5:
        try:
            r = httpx.post(d.url + "/api/generate", json=PROBE, timeout=0.3, trust_env=False)
        except httpx.ReadTimeout:  # accepted: waiting for the held slot (and now abandoned)
            return time.monotonic() - start
        assert r.status_code == 503, r.text
        time.sleep(0.05)
    raise AssertionError("the abandoned request still fills the queue")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/generate", GEN_LOOP),
        ("/api/chat", CHAT_LOOP),
        ("/v1/chat/completions", V1_CHAT_LOOP),
        ("/api/generate", {**GEN_LOOP, "stream": False}),
    ],
)
def test_disconnect_while_waiting_for_the_slot(
    one_slot: Daemon, path: str, body: dict[str, Any]
) -> None:
    d = one_slot
    base = warm_probe(d)
    with hold_slot(d):
        waiter = send_raw(d, path, {"stream": True, **body})
        time.sleep(0.5)
        r = httpx.post(d.url + "/api/generate", json=PROBE, timeout=10, trust_env=False)
        assert r.status_code == 503  # the queue of one holds the waiter
        waiter.close()
        left = queue_frees(d)
        print(f"{path}: the abandoned waiter left the queue within {left:.3f}s")
        assert left < SLACK_S
    # Neither abandoned request (the waiter, nor the probe that timed out) takes the slot.
    took = probe(d)
    print(f"probe after the holder left: {took:.3f}s (alone {base:.3f}s)")
    assert took < base + SLACK_S
    assert f"POST {path} 499 " in access_log(d)


@pytest.mark.parametrize(
    ("path", "body", "marker"),
    [
        ("/api/generate", GEN_LOOP, b'"done":false'),
        ("/api/chat", CHAT_LOOP, b'"done":false'),
        ("/v1/chat/completions", V1_CHAT_LOOP, b"data: "),
        (
            "/v1/completions",
            {"model": "tiny-long", "prompt": LOOP_PROMPT, "temperature": 0},
            b"data: ",
        ),
    ],
)
def test_stream_disconnect_after_tokens(
    one_slot: Daemon, path: str, body: dict[str, Any], marker: bytes
) -> None:
    d = one_slot
    base = warm_probe(d)
    sock = send_raw(d, path, {**body, "stream": True})
    read_some(sock, marker, 3)
    abandon_and_probe(d, sock, base, path)
