"""Fetch an image named by an ``http(s)`` URL, when ``LOCALLLM_FETCH_IMAGE_URLS`` allows it.

Off by default: a daemon that fetches URLs for its clients can be made to
reach places the client cannot (server-side request forgery).  When enabled:

- ``1``: only public addresses.  Every hop's host is resolved, refused if any
  of its addresses is private, loopback, link-local, reserved or multicast,
  and the connection goes to the address that was checked (the original host
  still names the TLS certificate and the ``Host`` header), so a second DNS
  answer cannot swap in an internal address.  Redirects are followed by hand,
  at most ``MAX_REDIRECTS``, each hop checked the same way.
- ``all``: any address, for a daemon on a trusted LAN whose images live there.

Every fetch has a time limit (``TIMEOUT_S`` for all hops together) and a size
cap (``localllm.config.MAX_IMAGE_BYTES``, checked against ``Content-Length``
and again while reading).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from localllm import config
from localllm.errors import InvalidRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
TIMEOUT_S = 10.0
MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)


def public_address(ip: IPAddress) -> bool:
    """True for an address on the public internet (what mode ``1`` may reach)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_allowed(index: int) -> None:
    """Refuse a URL image up front when fetching is off (before any model loads)."""
    if config.FETCH_IMAGE_URLS.get() == "off":
        raise InvalidRequest(
            f"image {index + 1} is an http(s) URL, which this server does not fetch: send "
            "the image as base64 (a data: URL), or start the daemon with "
            "LOCALLLM_FETCH_IMAGE_URLS=1")


async def fetch_image(url: str, index: int, *,
                      allow: Callable[[IPAddress], bool] | None = None) -> bytes:
    """The bytes at ``url`` within the limits, or ``InvalidRequest`` saying what went wrong.

    ``allow``: which addresses may be reached (default: per the setting).
    """
    check_allowed(index)
    if allow is None:
        allow = public_address if config.FETCH_IMAGE_URLS.get() == "public" else _any
    try:
        return await asyncio.wait_for(_fetch(url, index, allow), TIMEOUT_S)
    except TimeoutError:
        raise InvalidRequest(
            f"image {index + 1}: fetching {url} took longer than {TIMEOUT_S:g} s") from None


def _any(ip: IPAddress) -> bool:
    return True


async def _fetch(url: str, index: int, allow: Callable[[IPAddress], bool]) -> bytes:
    import httpx

    what = f"image {index + 1}"
    cap = config.MAX_IMAGE_BYTES
    async with httpx.AsyncClient(follow_redirects=False, timeout=TIMEOUT_S) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidRequest(f"{what}: {url!r} is not an http(s) URL")
            ip = await _checked_address(parts.hostname, parts.port, parts.scheme, allow, what)
            pinned = httpx.URL(url).copy_with(host=str(ip))
            headers = {"Host": parts.netloc.rsplit("@", 1)[-1]}
            extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
            try:
                async with client.stream("GET", pinned, headers=headers,
                                         extensions=extensions) as resp:
                    if resp.status_code in _REDIRECTS and "location" in resp.headers:
                        url = urljoin(url, resp.headers["location"])
                        continue
                    if resp.status_code != 200:
                        raise InvalidRequest(f"{what}: {url} answered {resp.status_code}")
                    declared = resp.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > cap:
                        raise InvalidRequest(f"{what}: {url} is {declared} bytes; the limit "
                                             f"is {cap} bytes")
                    data = bytearray()
                    async for chunk in resp.aiter_bytes():
                        data += chunk
                        if len(data) > cap:
                            raise InvalidRequest(f"{what}: {url} is over the limit of "
                                                 f"{cap} bytes")
                    return bytes(data)
            except httpx.HTTPError as exc:
                raise InvalidRequest(f"{what}: cannot fetch {url}: {exc}") from None
    raise InvalidRequest(f"{what}: {url} redirects more than {MAX_REDIRECTS} times")


async def _checked_address(host: str, port: int | None, scheme: str,
                           allow: Callable[[IPAddress], bool], what: str) -> IPAddress:
    """The address to connect to; every address the host resolves to must be allowed."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port or (443 if scheme == "https" else 80),
                                       type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InvalidRequest(f"{what}: cannot resolve {host}: {exc}") from None
    ips = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    refused = [ip for ip in ips if not allow(ip)]
    if refused or not ips:
        raise InvalidRequest(
            f"{what}: {host} resolves to {refused[0] if refused else 'nothing'}, a private, "
            "loopback or reserved address, which image URLs may not reach "
            "(LOCALLLM_FETCH_IMAGE_URLS=all allows it on a trusted network)")
    return ips[0]
