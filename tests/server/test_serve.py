"""The daemon's socket and the pull stream's reaction to a client that leaves."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest
from fastapi import FastAPI

from localllm.errors import LocalLLMError
from localllm.server import serve

pytestmark = pytest.mark.anyio


def test_bound_socket_is_tcp_so_asyncio_sets_nodelay() -> None:
    sock = serve._bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        port = sock.getsockname()[1]
        with pytest.raises(LocalLLMError, match=f"127.0.0.1:{port}"):
            serve._bind("127.0.0.1", port)
    finally:
        sock.close()


async def test_client_disconnect_cancels_a_quiet_pull(app: FastAPI) -> None:
    cancelled = threading.Event()
    started = threading.Event()

    def pull(
        model: str,
        progress: Any,
        *,
        cancel: threading.Event | None = None,
        projector: str | None = None,
        **fit: Any,
    ) -> None:
        assert cancel is not None
        progress({"status": "pulling manifest"})
        started.set()
        # A stalled download: no events, only the cancel flag ends it.
        cancel.wait(30)
        cancelled.set()

    app.state.models.pull = pull
    body = b'{"model": "hf.co/u/r"}'
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/pull",
        "raw_path": b"/api/pull",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost:11434"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 11434),
    }
    task = asyncio.create_task(app(scope, receive, send))
    assert await asyncio.to_thread(started.wait, 10)
    gone.set()
    await asyncio.wait_for(task, 10)
    assert await asyncio.to_thread(cancelled.wait, 10)
    assert sent[0]["status"] == 200
