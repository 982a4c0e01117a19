"""A real uvicorn server on a loopback port, in a thread: for what ASGI transports hide
(keep-alive connections, stalled sockets, the worker-thread pool)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from localllm.server.serve import uvicorn_settings


@contextmanager
def live_server(app: FastAPI, **overrides: object) -> Iterator[int]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, **{**uvicorn_settings(), **overrides}))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
