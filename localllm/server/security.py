"""Who may talk to the daemon: Host-header guard, CORS allow-list and the optional API key.

* DNS rebinding: a web page on ``evil.com`` whose name resolves to 127.0.0.1
  can reach a loopback daemon from the victim's browser, but its requests
  carry ``Host: evil.com``.  While bound to loopback, only IP literals that are
  loopback/private, ``localhost`` and ``*.localhost`` (which never leave the
  machine, RFC 6761), this machine's name and the exact host names written in
  ``LOCALLLM_ORIGINS`` pass; anything else gets 403.  ``*.local`` is refused:
  any device on the LAN can answer an mDNS query for it, which is rebinding by
  another route (list such a name in ``LOCALLLM_ORIGINS`` to allow it).
  Origins and Hosts are separate checks: a wildcard in an origin
  (``LOCALLLM_ORIGINS=*``, ``chrome-extension://*``, ``https://*.example.com``)
  lets pages of those origins call the API, but adds no Host — a Host pattern
  ``*`` would let any rebinding page read ``/api/tags``, ``/api/ps`` and
  ``/metrics``, since the rebound page's requests carry its own name.
* CORS: browsers may call the API from ``LOCALLLM_ORIGINS`` plus local origins
  (localhost, 127.0.0.1, 0.0.0.0 on any port) and desktop/editor app schemes.
  A request from any other origin is refused with 403, so a foreign page
  cannot even fire "simple" requests that skip the preflight.
* Cross-site requests without an origin: a page can fire a simple GET at the
  daemon (``<img src=...>``, a link prefetch) with no ``Origin`` header, and a
  GET here does work (``/api/search`` asks the Hub with the user's token).  A
  browser marks such a request ``Sec-Fetch-Site: cross-site`` (or ``same-site``);
  on every route and method it must then carry an allowed ``Origin``, else 403.
  Requests the user made themselves (``none``: a typed URL) and same-origin ones,
  and every non-browser client (no ``Sec-Fetch-*`` headers), are unaffected.
* ``LOCALLLM_API_KEY`` and the keys of ``LOCALLLM_API_KEYS_FILE`` (``apikeys.py``):
  when either is set, everything but ``/`` and ``/health`` needs one of the keys as
  ``Authorization: Bearer <key>`` or ``x-api-key: <key>`` (Anthropic's clients);
  the accepted key's label goes into the request's scope for the access log and
  the metrics (``apikeys.SCOPE_KEY_LABEL``).  Path matching is
  exact on the decoded path, so ``/health/../api/tags`` or ``//api/tags`` gain
  nothing: they are not ``/health`` and still need the key.
* Binding beyond loopback turns the Host guard off (names are the user's
  choice then); ``serve`` warns loudly when that happens without a key.

One pure ASGI middleware does all three, so streaming responses pass untouched.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Collection, Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localllm.server.apikeys import SCOPE_KEY_LABEL, KeyRing
from localllm.server.errorbody import error_doc, send_error

DEFAULT_ORIGINS = (
    "http://localhost",
    "https://localhost",
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1",
    "https://127.0.0.1",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://0.0.0.0",
    "https://0.0.0.0",
    "http://0.0.0.0:*",
    "https://0.0.0.0:*",
    "app://*",
    "file://*",
    "tauri://*",
    "vscode-webview://*",
    "vscode-file://*",
)
ALLOWED_HEADERS = frozenset(
    {
        "authorization",
        "content-type",
        "user-agent",
        "accept",
        "x-requested-with",
        "accept-language",
        "content-language",
        "cache-control",
        "x-api-key",
    }
)
# OpenAI's and Anthropic's SDKs send a family of x-stainless-* headers (lang, os, arch,
# retry-count, ...); Anthropic's also anthropic-version, anthropic-beta and the like.
_ALLOWED_HEADER_PREFIXES = ("x-stainless-", "anthropic-")
ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
_LOOPBACK_SUFFIX = ".localhost"
_OPEN_PATHS = frozenset({"/", "/health"})
_CROSS_SITE = frozenset({"cross-site", "same-site"})  # Sec-Fetch-Site values from other sites


def origin_pattern(origins: Iterable[str]) -> re.Pattern[str]:
    """One regex for an origin list: ``:*`` is any port (digits only), other ``*`` any
    run of host characters — never ``/``, so ``http://localhost:*`` cannot match
    ``http://localhost:1.evil.com`` and no wildcard reaches past the host.  A lone
    ``*`` is every origin, as in Ollama's ``OLLAMA_ORIGINS=*`` (the Host guard
    still holds: see ``origin_hosts``)."""
    parts = []
    for origin in origins:
        text = re.escape(origin.strip().rstrip("/"))
        if text == r"\*":
            parts.append(r"\S+")
        elif text:
            text = text.replace(r":\*", ":[0-9]+").replace(r"\*", r"[^/\s]*")
            parts.append(text)
    return re.compile("^(?:" + "|".join(parts) + ")$", re.IGNORECASE)


def is_loopback_bind(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host_header(value: str) -> str:
    """The host part of a Host header: ``[::1]:80`` -> ``::1``, ``a.b:1`` -> ``a.b``."""
    value = value.strip().lower()
    if value.startswith("["):
        inside, _, rest = value[1:].partition("]")
        # "[::1].evil.com" is not an IPv6 literal: keep it whole so it fails the check.
        return inside if re.fullmatch(r"(:[0-9]*)?", rest) else value
    if value.count(":") == 1:
        return value.partition(":")[0]
    return value


def origin_hosts(origins: Iterable[str]) -> frozenset[str]:
    """The exact host names of ``LOCALLLM_ORIGINS`` entries, so a name the user
    wrote as an origin also passes the Host guard.  An entry whose host holds a
    wildcard adds nothing: it names pages, not this machine (see the module
    docstring), and ``*`` as a Host would turn the guard off."""
    hosts = set()
    for origin in origins:
        rest = origin.strip().partition("://")[2] or origin.strip()
        host = split_host_header(rest.partition("/")[0]).rstrip(".")
        if host and "*" not in host:
            hosts.add(host)
    return frozenset(hosts)


def host_allowed(header: str, allowed: Collection[str] = ()) -> bool:
    """Whether a Host header names this machine (see the module docstring);
    ``allowed`` adds exact names (the hosts of the configured origins)."""
    host = split_host_header(header).rstrip(".")
    if host in ("", "localhost"):
        return True  # HTTP/1.0 clients may send no Host at all
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return addr.is_loopback or addr.is_private or addr.is_unspecified or addr.is_link_local
    if host == socket.gethostname().lower() or host.endswith(_LOOPBACK_SUFFIX):
        return True
    return host in allowed


def headers_allowed(requested: str) -> bool:
    for raw in requested.split(","):
        name = raw.strip().lower()
        if name and name not in ALLOWED_HEADERS and not name.startswith(_ALLOWED_HEADER_PREFIXES):
            return False
    return True


class SecurityMiddleware:
    """Host guard, CORS and API key in front of the whole app."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        guard_host: bool,
        origins: Iterable[str],
        api_key: str = "",
        keys: KeyRing | None = None,
    ) -> None:
        self.app = app
        self.guard_host = guard_host
        origins = list(origins)
        self.origins = origin_pattern([*origins, *DEFAULT_ORIGINS])
        self.origin_hosts = origin_hosts(origins)
        self.keys = keys if keys is not None else KeyRing(api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self.guard_host and not host_allowed(headers.get("host", ""), self.origin_hosts):
            await _error(send, 403, "forbidden: host not allowed")
            return
        origin = headers.get("origin")
        method = scope["method"]
        if origin is None and headers.get("sec-fetch-site", "").lower() in _CROSS_SITE:
            await _error(send, 403, "forbidden: cross-site request without an allowed origin")
            return
        if origin is not None:
            if not self.origins.match(origin):
                await _error(send, 403, "forbidden: origin not allowed")
                return
            if method == "OPTIONS" and "access-control-request-method" in headers:
                await self._preflight(send, origin, headers)
                return
        if self.keys.required and scope["path"] not in _OPEN_PATHS:
            label = self._key_label(headers)
            if label is None:
                # The one refusal in the shape of the path's API: its SDK reads error.message.
                await _error(
                    send, 401, "unauthorized: missing or wrong API key", origin, path=scope["path"]
                )
                return
            scope[SCOPE_KEY_LABEL] = label
        if origin is None:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = list(message.get("headers", []))
                raw.extend(_cors_headers(origin))
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _key_label(self, headers: Headers) -> str | None:
        """The label of the key the request carries, None when it carries none of ours."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and (label := self.keys.label(token.strip())):
            return label
        # Anthropic's clients send the key as x-api-key (Claude Code with
        # ANTHROPIC_API_KEY); with ANTHROPIC_AUTH_TOKEN they send a Bearer header.
        return self.keys.label(headers.get("x-api-key", "").strip())

    async def _preflight(self, send: Send, origin: str, headers: Headers) -> None:
        requested = headers.get("access-control-request-headers", "")
        if not headers_allowed(requested):
            await _error(send, 403, "forbidden: header not allowed", origin)
            return
        extra = [
            (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
            (b"access-control-max-age", b"43200"),
        ]
        if requested:
            extra.append((b"access-control-allow-headers", requested.encode("latin-1")))
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [*_cors_headers(origin), *extra],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"vary", b"Origin"),
    ]


async def _error(
    send: Send, status: int, message: str, origin: str | None = None, *, path: str = ""
) -> None:
    """A refusal; in Ollama's shape unless ``path`` names one of a foreign API's."""
    status, doc = error_doc(path, status, message, code="invalid_api_key")
    headers = []
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="localllm"'))
    if origin is not None:
        # Let an allowed page read why it was refused.
        headers.extend(_cors_headers(origin))
    await send_error(send, status, doc, headers)
