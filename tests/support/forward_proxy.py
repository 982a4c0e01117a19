"""A forwarding HTTP proxy stand-in, the kind ``HTTP_PROXY``/``HTTPS_PROXY`` name: it logs
every request it forwards.

A client told to use a proxy sends it ``GET http://host:port/path HTTP/1.1`` (the
absolute form).  This one connects to ``host:port``, sends the request on in origin
form with ``Connection: close``, copies the answer back with ``Connection: close``
added, and closes: one request per connection, so each is seen (``requests``: method,
absolute URL, ``Range``) and cuts by the server (``hubstub.cut_once``) reach the client
as they would without a proxy.  ``CONNECT host:port`` (how a client asks for an
``https://`` URL) is logged and refused with ``502``: enough to show the client asked.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
from dataclasses import dataclass, field
from typing import BinaryIO
from urllib.parse import urlsplit

from tests.support.threadserver import serve_in_thread, stop_server

_HOP = ("connection", "proxy-connection", "keep-alive", "proxy-authorization")


@dataclass
class ProxyRequest:
    method: str
    url: str  # absolute, as the client sent it (host:port for CONNECT)
    range: str | None


@dataclass
class ForwardProxy:
    requests: list[ProxyRequest] = field(default_factory=list)
    _server: socketserver.ThreadingTCPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ForwardProxy:
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(OSError):
                    proxy._forward(self.rfile, self.connection)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        serve_in_thread(self._server)
        return self

    def stop(self) -> None:
        stop_server(self._server)

    def _forward(self, rfile: BinaryIO, client: socket.socket) -> None:
        method, target, version = rfile.readline(65536).decode("latin-1").split()
        headers = _headers(rfile)
        rng = next((v for k, v in headers if k.lower() == "range"), None)
        self.requests.append(ProxyRequest(method, target, rng))
        if method == "CONNECT":
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        url = urlsplit(target)
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        kept = [(k, v) for k, v in headers if k.lower() not in _HOP]
        head = f"{method} {path} {version}\r\n" + _lines([*kept, ("Connection", "close")])
        with socket.create_connection((url.hostname or "", url.port or 80), timeout=30) as up:
            up.sendall(head.encode("latin-1"))  # GET and HEAD only: no request body
            answer = up.makefile("rb")
            status = answer.readline(65536).decode("latin-1")
            back = [(k, v) for k, v in _headers(answer) if k.lower() not in _HOP]
            client.sendall((status + _lines([*back, ("Connection", "close")])).encode("latin-1"))
            while data := answer.read1(65536):
                client.sendall(data)


def _headers(f: BinaryIO) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    while (line := f.readline(65536).decode("latin-1").rstrip("\r\n")) != "":
        name, _, value = line.partition(":")
        out.append((name.strip(), value.strip()))
    return out


def _lines(headers: list[tuple[str, str]]) -> str:
    return "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
