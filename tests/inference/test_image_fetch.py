"""Image URLs fetched by the daemon (``LOCALLLM_FETCH_IMAGE_URLS``): caps, timeout, addresses.

Two local HTTP servers, on 127.0.0.1 and 127.0.0.2 (both loopback on Linux),
stand in for a public site and an internal one: the address rule under test is
the ``allow`` predicate, here "anything but 127.0.0.2", so that a redirect
into the "internal" server is what gets refused.  The servers also send chained
Content-Encodings, count what they are asked for (the request's shared byte
budget), and a resolver that hangs for one name stands in for a DNS server that
never answers.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from localllm import config
from localllm.errors import InvalidRequest
from localllm.inference import image_fetch
from localllm.inference.image_fetch import IPAddress, fetch_image
from localllm.inference.images import Images
from tests.support.visionmodel import RED, png

RED_PNG = png(32, 32, RED)
MIB = 1 << 20


class _Handler(BaseHTTPRequestHandler):
    other = ""  # base URL of the other server
    seen: ClassVar[list[tuple[str, str]]] = []  # (path, Accept-Encoding) of each GET

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Accept-Encoding", "")))
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
        elif path == "/gzip-gzip":  # 200 KB of zeros gzipped twice: what httpx would inflate
            self._send(200, gzip.compress(gzip.compress(bytes(200_000))), encoding="gzip, gzip")
        elif path == "/identity":
            self._send(200, RED_PNG, encoding="identity")
        elif path.startswith("/mib"):  # 1 MiB, declared or (/mib-stream) not
            if path.startswith("/mib-stream"):
                self.send_response(200)
                self.end_headers()
                for _ in range(16):
                    self.wfile.write(bytes(MIB // 16))
            else:
                self._send(200, bytes(MIB))
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

    def _send(self, status: int, body: bytes, encoding: str = "") -> None:
        self.send_response(status)
        if encoding:
            self.send_header("Content-Encoding", encoding)
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
    urls = tuple("http://" + ":".join(map(str, s.server_address[:2])) for s in (public, internal))
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
    sites: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
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
    ok = ["8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "1.1.1.1", "2a00:1450:4001::1"]
    bad = [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "172.16.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ]
    # Issue 26: translation and tunnel forms that reach IPv4 (NAT64, 6to4, Teredo, SIIT,
    # IPv4-compatible), IETF protocol assignments (Python calls 192.0.0.9 global),
    # CGNAT, cloud platform addresses, documentation ranges Python does not know.
    bad += [
        "64:ff9b::7f00:1",
        "64:ff9b::a00:1",
        "64:ff9b::808:808",
        "64:ff9b:1::a00:1",
        "2002:7f00:1::1",
        "2002:a00:1::1",
        "2002:808:808::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "::ffff:0:7f00:1",
        "::7f00:1",
        "::a00:1",
        "::808:808",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:100.64.0.1",
        "192.0.0.1",
        "192.0.0.9",
        "192.0.0.170",
        "192.0.0.192",
        "100.100.100.200",
        "168.63.129.16",
        "::ffff:168.63.129.16",
        "fd00:ec2::254",
        "3fff::1",
        "5f00::1",
        "100::1",
        "192.88.99.1",
        "198.18.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "ff02::1",
    ]
    assert [a for a in ok if not image_fetch.public_address(ipaddress.ip_address(a))] == []
    assert [a for a in bad if image_fetch.public_address(ipaddress.ip_address(a))] == []


def test_responses_come_unencoded(sites: tuple[str, str]) -> None:
    public, _ = sites
    _Handler.seen.clear()
    with pytest.raises(
        InvalidRequest,
        match=r"image 1: .*/gzip-gzip was sent with "
        r"Content-Encoding 'gzip, gzip'; image URLs "
        r"must be served as they are",
    ):
        fetch(public + "/gzip-gzip")
    assert fetch(public + "/identity") == RED_PNG
    assert fetch(public + "/red.png") == RED_PNG
    assert [e for _, e in _Handler.seen] == ["identity"] * 3


def resolve(images: Images) -> list[bytes]:
    return asyncio.run(images.resolve())


@pytest.mark.parametrize("route", ["/mib", "/mib-stream"])
def test_a_requests_fetches_share_its_byte_budget(
    sites: tuple[str, str], route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    public, _ = sites
    monkeypatch.setattr(config, "MAX_IMAGES_BYTES", 5 * MIB // 2)
    _Handler.seen.clear()
    with pytest.raises(
        InvalidRequest,
        match=r"the request's images take more than 2621440 "
        r"bytes together, the limit \(found while "
        r"fetching image 3\)",
    ):
        resolve(Images([f"{public}{route}/{k}" for k in range(4)]))
    assert [p for p, _ in _Handler.seen] == [f"{route}/{k}" for k in range(3)]  # not the 4th
    # What inline images take comes off the budget first.
    _Handler.seen.clear()
    with pytest.raises(InvalidRequest, match="found while fetching image 2"):
        resolve(Images([bytes(2 * MIB), f"{public}{route}/0"]))
    assert len(_Handler.seen) == 1


def test_dns_lookups_end_with_the_budget_and_leave_the_loops_threads_free(
    sites: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    public, _ = sites
    port = public.rsplit(":", 1)[1]
    release = threading.Event()
    real = socket.getaddrinfo

    def hanging(host: Any, *args: Any, **kw: Any) -> Any:
        if host == "hangs.test":
            release.wait(10)  # a DNS server that does not answer
            raise socket.gaierror("no answer")
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    monkeypatch.setattr(image_fetch, "TIMEOUT_S", 0.3)
    # More hanging lookups than the loop's default executor has threads (asyncio's
    # min(32, cores + 4)): the loop's own to_thread work must still run at once.
    n = min(32, (os.cpu_count() or 1) + 4) + 2

    async def main() -> tuple[list[BaseException | bytes], float]:
        start = time.monotonic()
        out = await asyncio.gather(
            *(fetch_image(f"http://hangs.test:{port}/red.png", k) for k in range(n)),
            return_exceptions=True,
        )
        took = time.monotonic() - start
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 0.5) == 42
        return out, took

    try:
        out, took = asyncio.run(main())
    finally:
        release.set()
    assert took < 1.5
    assert all(
        isinstance(e, InvalidRequest)
        and "resolving hangs.test took longer than the 0.3 s an image fetch may take" in str(e)
        for e in out
    ), out
