"""Slow and vanishing clients against a real server: they may not starve anyone else."""

from __future__ import annotations

import hashlib
import http.client
import logging
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from localllm.server import routes_models
from localllm.server.app import create_app
from localllm.store.local import Store
from tests.support.fake_scheduler import fake_scheduler
from tests.support.live_server import live_server

DIGEST = "sha256:" + hashlib.sha256(b"never sent").hexdigest()


def _stalled_upload(port: int, stack: ExitStack) -> socket.socket:
    """A client that starts a 1000-byte upload, sends one byte and goes quiet."""
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
    sock.sendall(
        f"POST /api/blobs/{DIGEST} HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Length: 1000\r\n\r\nx".encode()
    )
    return sock


def _get(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        start = time.monotonic()
        conn.request(method, path, body=body)
        r = conn.getresponse()
        r.read()
        return r.status, time.monotonic() - start
    finally:
        conn.close()


@pytest.fixture
def port(store: Store) -> Iterator[int]:
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    with live_server(app) as p:
        yield p


def test_stalled_uploads_do_not_stop_the_management_api(port: int) -> None:
    with ExitStack() as stack:
        for _ in range(48):  # more than the 40 worker threads
            _stalled_upload(port, stack)
        time.sleep(0.5)  # let the server start every upload
        for method, path, body in (
            ("GET", "/api/tags", None),
            ("GET", "/", None),
            ("DELETE", "/api/delete", b'{"model": "nope"}'),
            ("POST", "/api/show", b'{"model": "nope"}'),
            ("POST", "/api/create", b'{"model": "x"}'),
        ):
            status, seconds = _get(port, method, path, body)
            assert status < 500, (path, status)
            assert seconds < 2, (path, seconds)


def test_a_stalled_upload_is_dropped(
    port: int, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes_models, "BODY_READ_TIMEOUT", 0.3)
    with ExitStack() as stack:
        sock = _stalled_upload(port, stack)
        reply = b""
        while chunk := sock.recv(4096):  # until the server closes the connection
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 408"), reply
        assert b"connection: close" in reply.lower()
    assert not [p for p in store.blobs.root.iterdir() if p.name.startswith(".tmp-")]


def test_a_client_that_never_finishes_its_headers_is_dropped(store: Store) -> None:
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    with (
        live_server(app, timeout_keep_alive=0.3) as p,
        socket.create_connection(("127.0.0.1", p), timeout=5) as sock,
    ):
        sock.sendall(b"GET /api/tags HTTP/1.1\r\nHost: loc")
        assert sock.recv(4096) == b""


def test_a_client_gone_mid_upload_is_one_info_line(
    port: int, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with ExitStack() as stack:
        _stalled_upload(port, stack).sendall(b"y" * 100)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "disconnected" not in caplog.text:
        time.sleep(0.05)
    lines = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and lines[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [p for p in store.blobs.root.iterdir() if p.name.startswith(".tmp-")]
