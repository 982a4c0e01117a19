"""Fetch an image named by an ``http(s)`` URL, when ``LOCALLLM_FETCH_IMAGE_URLS`` allows it.

Off by default: a daemon that fetches URLs for its clients can be made to
reach places the client cannot (server-side request forgery).  When enabled:

- ``1``: only public addresses (``public_address``).  Every hop's host is resolved,
  refused if any of its addresses is not public, and the connection goes to the
  address that was checked (the original host still names the TLS certificate and
  the ``Host`` header), so a second DNS answer cannot swap in an internal address.
  Redirects are followed by hand, at most ``MAX_REDIRECTS``, each hop checked the
  same way.
- ``all``: any address, for a daemon on a trusted LAN whose images live there.

Every fetch has a time limit (``TIMEOUT_S`` for all hops together, DNS lookups
included: they run on a small pool of their own, so lookups that hang hold neither
the loop nor the default executor, and each is awaited only for what is left of
the budget) and a size cap (``localllm.config.MAX_IMAGE_BYTES``, checked against
``Content-Length`` and again while reading).  A request's fetches share a ``Budget``
of ``MAX_IMAGES_BYTES`` together, checked as bytes arrive.  The response must come
as is (``Accept-Encoding: identity``; any other ``Content-Encoding`` is refused):
image formats are compressed already, and a decoder for the transfer would inflate
a small body to gigabytes before any cap could be checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from localllm import config
from localllm.errors import InvalidRequest

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
TIMEOUT_S = 10.0
MAX_REDIRECTS = 3
DNS_THREADS = 4
_REDIRECTS = (301, 302, 303, 307, 308)
_dns_pool: ThreadPoolExecutor | None = None

# Addresses is_global lets through that mode 1 must not reach: 192.0.0.0/24 (IETF
# protocol assignments; Python calls two of them global), the Azure platform's
# wire server (168.63.129.16), and in IPv6 everything that carries or reaches an IPv4
# address or a private network by translation: NAT64 (64:ff9b::/96, 64:ff9b:1::/48),
# 6to4 (2002::/16), Teredo (2001::/32), SIIT's translated form (::ffff:0:0:0/96) and
# the deprecated IPv4-compatible form (::/96), with the 6to4 relays' anycast
# 192.88.99.0/24; plus 3fff::/20 (documentation, newer than Python's table).  Most of
# the IPv6 ones are outside 2000::/3, refused on that ground too, as is AWS's metadata
# service fd00:ec2::254 (a unique-local address); 169.254.169.254, every cloud's
# metadata address, is link-local and 100.64.0.0/10 (CGNAT, Alibaba's metadata at
# 100.100.100.200) shared space, neither global.  IPv4-mapped addresses are judged as
# the IPv4 they map.
_BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in (
        "192.0.0.0/24",
        "168.63.129.16/32",
        "100.64.0.0/10",
        "192.88.99.0/24",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "2002::/16",
        "2001::/32",
        "::ffff:0:0:0/96",
        "::/96",
        "3fff::/20",
    )
)
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def public_address(ip: IPAddress) -> bool:
    """True for an address on the public internet (what mode ``1`` may reach)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip not in _GLOBAL_UNICAST:  # the only IPv6 space that is routed publicly
            return False
    if any(ip in net for net in _BLOCKED if net.version == ip.version):
        return False
    return ip.is_global and not ip.is_multicast


@dataclass
class Budget:
    """Bytes a request's images may still take together (``MAX_IMAGES_BYTES``),
    shared by its fetches and spent as bytes arrive."""

    left: int

    def check(self, n: int, what: str) -> None:
        """Refuse ``n`` more bytes when they do not fit."""
        if n > self.left:
            raise InvalidRequest(
                f"the request's images take more than {config.MAX_IMAGES_BYTES} bytes "
                f"together, the limit (found while fetching {what})"
            )

    def spend(self, n: int, what: str) -> None:
        self.check(n, what)
        self.left -= n


def check_allowed(index: int) -> None:
    """Refuse a URL image up front when fetching is off (before any model loads)."""
    if config.FETCH_IMAGE_URLS.get() == "off":
        raise InvalidRequest(
            f"image {index + 1} is an http(s) URL, which this server does not fetch: send "
            "the image as base64 (a data: URL), or start the daemon with "
            "LOCALLLM_FETCH_IMAGE_URLS=1"
        )


async def fetch_image(
    url: str,
    index: int,
    *,
    allow: Callable[[IPAddress], bool] | None = None,
    budget: Budget | None = None,
) -> bytes:
    """The bytes at ``url`` within the limits, or ``InvalidRequest`` saying what went wrong.

    ``allow``: which addresses may be reached (default: per the setting).  ``budget``:
    what the request's images may still take (default: ``MAX_IMAGES_BYTES``).
    """
    check_allowed(index)
    if allow is None:
        allow = public_address if config.FETCH_IMAGE_URLS.get() == "public" else _any
    if budget is None:
        budget = Budget(config.MAX_IMAGES_BYTES)
    deadline = asyncio.get_running_loop().time() + TIMEOUT_S
    resolving: list[str] = []  # the host being looked up, while it is
    try:
        return await asyncio.wait_for(
            _fetch(url, index, allow, budget, deadline, resolving), TIMEOUT_S
        )
    except TimeoutError:
        if resolving:
            raise _dns_timeout(f"image {index + 1}", resolving[0]) from None
        raise InvalidRequest(
            f"image {index + 1}: fetching {url} took longer than {TIMEOUT_S:g} s"
        ) from None


def _dns_timeout(what: str, host: str) -> InvalidRequest:
    return InvalidRequest(
        f"{what}: resolving {host} took longer than the {TIMEOUT_S:g} s an image fetch may take"
    )


def _any(ip: IPAddress) -> bool:
    return True


async def _fetch(
    url: str,
    index: int,
    allow: Callable[[IPAddress], bool],
    budget: Budget,
    deadline: float,
    resolving: list[str],
) -> bytes:
    import httpx

    what = f"image {index + 1}"
    cap = config.MAX_IMAGE_BYTES
    async with httpx.AsyncClient(follow_redirects=False, timeout=TIMEOUT_S) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidRequest(f"{what}: {url!r} is not an http(s) URL")
            resolving[:] = [parts.hostname]
            ip = await _checked_address(
                parts.hostname, parts.port, parts.scheme, allow, what, deadline
            )
            resolving.clear()
            pinned = httpx.URL(url).copy_with(host=str(ip))
            # identity: the bytes as they are, never a transfer coding to inflate.
            headers = {"Host": parts.netloc.rsplit("@", 1)[-1], "Accept-Encoding": "identity"}
            extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
            try:
                async with client.stream(
                    "GET", pinned, headers=headers, extensions=extensions
                ) as resp:
                    if resp.status_code in _REDIRECTS and "location" in resp.headers:
                        url = urljoin(url, resp.headers["location"])
                        continue
                    if resp.status_code != 200:
                        raise InvalidRequest(f"{what}: {url} answered {resp.status_code}")
                    return await _body(resp, url, what, cap, budget)
            except httpx.HTTPError as exc:
                raise InvalidRequest(f"{what}: cannot fetch {url}: {exc}") from None
    raise InvalidRequest(f"{what}: {url} redirects more than {MAX_REDIRECTS} times")


async def _body(resp: Any, url: str, what: str, cap: int, budget: Budget) -> bytes:
    """The response's raw bytes, within the image's cap and the request's budget."""
    encoding = resp.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise InvalidRequest(
            f"{what}: {url} was sent with Content-Encoding {encoding!r}; image URLs must be "
            "served as they are (identity), image formats being compressed already"
        )
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise InvalidRequest(f"{what}: {url} is {declared} bytes; the limit is {cap} bytes")
    if declared.isdigit():
        budget.check(int(declared), what)  # refused before a byte is read
    data = bytearray()
    async for chunk in resp.aiter_raw():  # raw: nothing decoded on the way
        data += chunk
        budget.spend(len(chunk), what)
        if len(data) > cap:
            raise InvalidRequest(f"{what}: {url} is over the limit of {cap} bytes")
    return bytes(data)


def _pool() -> ThreadPoolExecutor:
    global _dns_pool
    if _dns_pool is None:
        _dns_pool = ThreadPoolExecutor(DNS_THREADS, thread_name_prefix="localllm-dns")
    return _dns_pool


async def _checked_address(
    host: str,
    port: int | None,
    scheme: str,
    allow: Callable[[IPAddress], bool],
    what: str,
    deadline: float,
) -> IPAddress:
    """The address to connect to; every address the host resolves to must be allowed."""
    loop = asyncio.get_running_loop()
    # getaddrinfo cannot be cancelled: on its own small pool, a lookup that hangs holds
    # one of its threads, never the loop's default executor (templates, grammars).
    lookup = loop.run_in_executor(
        _pool(),
        lambda: socket.getaddrinfo(
            host, port or (443 if scheme == "https" else 80), type=socket.SOCK_STREAM
        ),
    )
    try:
        infos = await asyncio.wait_for(lookup, max(0.0, deadline - loop.time()))
    except TimeoutError:
        raise _dns_timeout(what, host) from None
    except OSError as exc:
        raise InvalidRequest(f"{what}: cannot resolve {host}: {exc}") from None
    ips = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    refused = [ip for ip in ips if not allow(ip)]
    if refused or not ips:
        raise InvalidRequest(
            f"{what}: {host} resolves to {refused[0] if refused else 'nothing'}, a private, "
            "loopback or reserved address, which image URLs may not reach "
            "(LOCALLLM_FETCH_IMAGE_URLS=all allows it on a trusted network)"
        )
    return ips[0]
