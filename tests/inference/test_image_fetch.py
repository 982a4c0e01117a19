"""Image URLs fetched by the daemon (``LOCALLLM_FETCH_IMAGE_URLS``): caps, timeout, addresses.

Two local HTTP servers, on 127.0.0.1 and 127.0.0.2 (both loopback on Linux),
stand in for a public site and an internal one: the address rule under test is
the ``allow`` predicate, here "anything but 127.0.0.2", so that a redirect
into the "internal" server is what gets refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from localllm import config
from localllm.errors import InvalidRequest
from localllm.inference import image_fetch
from localllm.inference.image_fetch import IPAddress, fetch_image
from tests.visionmodel import RED, png

RED_PNG = png(32, 32, RED)


class _Handler(BaseHTTPRequestHandler):
    other = ""  # base URL of the other server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        try:
            self._route(self.path)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (the cap and timeout tests)

    def _route(self, path: str) -> None:
        if path == "/red.png":
            self._send(200, RED_PNG)
        elif path == "/big":
            self.send_response(200)
            self.send_header("Content-Length", str(100 << 20))
            self.end_headers()
        elif path == "/endless":  # no Content-Length: the cap applies while reading
            self.send_response(200)
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"\0" * 1024)
        elif path == "/slow":
            time.sleep(2)
            self._send(200, RED_PNG)
        elif path.startswith("/to-other"):
            self._redirect(self.other + "/red.png")
        elif path == "/to-self":
            self._redirect("/red.png")
        elif path == "/loop":
            self._redirect("/loop")
        else:
            self._send(404, b"no")

    def _redirect(self, where: str) -> None:
        self.send_response(302)
        self.send_header("Location", where)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(host: str) -> ThreadingHTTPServer:
    class Handler(_Handler):
        pass

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def sites(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(the "public" site's URL, the "internal" one's), with fetching on for any address."""
    monkeypatch.setenv("LOCALLLM_FETCH_IMAGE_URLS", "all")
    public, internal = _serve("127.0.0.1"), _serve("127.0.0.2")
    urls = tuple(f"http://{s.server_address[0]}:{s.server_address[1]}" for s in (public, internal))
    for server, other in ((public, urls[1]), (internal, urls[0])):
        server.RequestHandlerClass.other = other  # type: ignore[attr-defined]
    try:
        yield urls  # type: ignore[misc]
    finally:
        for server in (public, internal):
            server.shutdown()
            server.server_close()


def _not_internal(ip: IPAddress) -> bool:
    return ip != ipaddress.ip_address("127.0.0.2")


def fetch(url: str, **kw: Any) -> bytes:
    return asyncio.run(fetch_image(url, 0, **kw))


def test_fetch_follows_redirects_within_the_rule(sites: tuple[str, str]) -> None:
    public, _internal = sites
    assert fetch(public + "/red.png") == RED_PNG
    assert fetch(public + "/to-self", allow=_not_internal) == RED_PNG
    assert fetch(public + "/to-other") == RED_PNG  # "all": any address
    with pytest.raises(InvalidRequest, match=r"127\.0\.0\.2, a private, loopback or reserved"):
        fetch(public + "/to-other", allow=_not_internal)
    with pytest.raises(InvalidRequest, match="redirects more than 3 times"):
        fetch(public + "/loop")
    with pytest.raises(InvalidRequest, match="answered 404"):
        fetch(public + "/missing")


def test_mode_1_refuses_loopback_and_off_refuses_everything(
        sites: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    public, _ = sites
    monkeypatch.setenv("LOCALLLM_FETCH_IMAGE_URLS", "1")
    with pytest.raises(InvalidRequest, match=r"image 1: 127\.0\.0\.1 resolves to 127\.0\.0\.1"):
        fetch(public + "/red.png")
    with pytest.raises(InvalidRequest, match=r"resolves to 127\.0\.0\.1"):
        fetch(public.replace("127.0.0.1", "localhost") + "/red.png")
    monkeypatch.setenv("LOCALLLM_FETCH_IMAGE_URLS", "0")
    with pytest.raises(InvalidRequest, match="does not fetch"):
        fetch(public + "/red.png")


def test_size_cap_and_timeout(sites: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    public, _ = sites
    with pytest.raises(InvalidRequest, match=f"is {100 << 20} bytes; the limit is"):
        fetch(public + "/big")
    monkeypatch.setattr(config, "MAX_IMAGE_BYTES", 16 << 10)
    with pytest.raises(InvalidRequest, match=f"over the limit of {16 << 10} bytes"):
        fetch(public + "/endless")
    monkeypatch.setattr(image_fetch, "TIMEOUT_S", 0.3)
    start = time.monotonic()
    with pytest.raises(InvalidRequest, match=r"took longer than 0\.3 s"):
        fetch(public + "/slow")
    assert time.monotonic() - start < 1.5


def test_public_address_rule() -> None:
    ok = ["8.8.8.8", "2606:4700::1111"]
    bad = ["127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "169.254.169.254",
           "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1",
           "224.0.0.1"]
    assert all(image_fetch.public_address(ipaddress.ip_address(a)) for a in ok)
    assert not any(image_fetch.public_address(ipaddress.ip_address(a)) for a in bad)
