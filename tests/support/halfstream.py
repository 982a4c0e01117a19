"""A stand-in daemon on 127.0.0.1 that dies in the middle of every answer that has a body to cut.

It speaks just enough HTTP/1.1 for the client: ``GET /`` and ``POST /api/show``
answer in full; every NDJSON stream (chat, generate, pull, create) sends
``LINES`` and then the connection ends without the chunked terminator, as a
daemon killed mid-answer would leave it; every other route sends half of its
JSON body.  ``mode="reset"`` ends connections with a TCP reset (RST) rather
than a plain close, and also cuts uploads short.  One thread per connection,
so sync clients, async clients and a CLI subprocess can all use it.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import threading
import time
from types import TracebackType
from typing import Any

LINES: list[dict[str, Any]] = [
    {"model": "m", "message": {"role": "assistant", "content": "Hel"}, "done": False},
    {"model": "m", "message": {"role": "assistant", "content": "lo"}, "done": False},
]
SHOW = {"capabilities": ["completion"], "details": {"family": "llama"}, "model_info": {}}
STREAMS = ("/api/chat", "/api/generate", "/api/pull", "/api/create")


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        method, path, _ = self.rfile.readline().decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while line := self.rfile.readline().decode("latin-1").strip():
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if path.startswith("/api/blobs/") and method == "POST":
            self._end()  # mid-upload: nothing read, nothing answered
            return
        if "content-length" in headers:
            self.rfile.read(int(headers["content-length"]))
        if path == "/":
            self._whole(b"localllm is running", "text/plain")
        elif path == "/api/show":
            self._whole(json.dumps(SHOW).encode(), "application/json")
        elif path in STREAMS:
            self._head("Transfer-Encoding: chunked", "application/x-ndjson")
            for item in LINES:
                data = (json.dumps(item) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            time.sleep(0.1)  # the client reads what came before the connection ends
            self._end()
        else:
            body = json.dumps({"models": [SHOW] * 20}).encode()
            self._head(f"Content-Length: {len(body)}", "application/json")
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self._end()

    def _head(self, length: str, content_type: str) -> None:
        self.wfile.write(
            (
                f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{length}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
        )

    def _whole(self, body: bytes, content_type: str) -> None:
        self._head(f"Content-Length: {len(body)}", content_type)
        self.wfile.write(body)

    def _end(self) -> None:
        if self.server.mode == "reset":
            # Linger on with a zero timeout: close() sends RST, as a crashed host would.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    mode = "close"


class HalfStreamServer:
    """``with HalfStreamServer() as s: Client(s.url)...``."""

    def __init__(self, mode: str = "close") -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.mode = mode
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        # A short poll keeps shutdown() quick (the default waits up to half a second).
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> HalfStreamServer:
        self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
