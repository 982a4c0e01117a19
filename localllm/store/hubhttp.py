"""Reading the Hub's JSON API safely, and a client whose spending a caller can bound.

Every JSON answer from the Hub (a repo's tree, the model search, a model's info)
is read by ``get_json``:

* asked for with ``Accept-Encoding: identity`` and read with ``iter_raw``: a
  compressed answer is refused, never inflated (a gzip bomb of a few MB would
  otherwise expand to gigabytes inside the decoder, before any size check);
* at most ``MAX_ANSWER`` bytes (8 MiB parses in ~35 ms: one ``json.loads``
  holds the GIL, so this also bounds how long a parse can stall the event loop);
* parsed with hostile nesting (``[[[[...``) turned into a clear error, not a
  ``RecursionError`` that escapes as a 500;
* a paginated answer's next page (``Link: <...>; rel="next"``) is followed only
  on the endpoint's scheme, host and port and on the very API path just read;
  any other link stops the paging with a log line.

``Bounds`` is what a caller allows one job (a search): a number of requests, a
deadline, and ``cancel()``, which refuses every later request and shuts the
sockets of the answers being read, so a thread blocked on a slow Hub returns at
once.  ``bounded_client`` wires a ``Bounds`` into an ``httpx.Client`` with event
hooks: each request spends one, and its timeouts shrink to the time left.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from localllm import tls
from localllm.errors import LocalLLMError, PullError

log = logging.getLogger(__name__)

MAX_ANSWER = 8 << 20


class HubStatusError(PullError):
    """The Hub answered an API call with a status other than 200."""

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message, status=status if status >= 400 else 502)
        self.answered = status
        self.code = code  # the Hub's ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ...)


class Stopped(LocalLLMError):
    """A bounded job ran out of time or requests (or was cancelled): what is known is kept."""

    status = 504


def headers(token: str | None) -> dict[str, str]:
    """What every API request carries: user agent, the token if any, no compression."""
    from huggingface_hub.utils import build_hf_headers

    return {**build_hf_headers(token=token), "Accept-Encoding": "identity"}


def get_json(
    client: httpx.Client,
    url: str,
    params: Any = None,
    *,
    endpoint: str,
    token: str | None,
    limit: int = MAX_ANSWER,
) -> tuple[Any, str | None]:
    """The JSON at ``url`` (on ``endpoint``, the Hub's base URL) and the next page's URL
    when the Hub names a safe one."""
    with client.stream("GET", url, params=params, headers=headers(token)) as r:
        path = r.url.path
        if r.status_code != 200:
            raise HubStatusError(
                f"the Hub answered {r.status_code} to {path}",
                status=r.status_code,
                code=r.headers.get("x-error-code", ""),
            )
        encoding = r.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            # Asked for identity: a compressed answer is refused unread, not inflated.
            raise PullError(
                f"the Hub sent {path} compressed ({encoding[:40]}) though asked not to", status=502
            )
        body = read_capped(
            r.iter_raw(),
            limit,
            lambda: PullError(f"the Hub's answer to {path} is over {limit >> 20} MiB", status=502),
        )
        nxt = next_page(r, endpoint)
    try:
        return json.loads(body), nxt
    except RecursionError:
        raise PullError(f"the Hub's answer to {path} is nested too deeply", status=502) from None
    except ValueError:
        raise PullError(f"the Hub sent malformed JSON for {path}", status=502) from None


def read_capped(chunks: Iterable[bytes], limit: int, too_long: Callable[[], Exception]) -> bytes:
    """An answer's body, refused with ``too_long()`` as soon as it passes ``limit`` bytes:
    more is an error, never a truncation, and nothing past the limit is held."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise too_long()
    return bytes(body)


def next_page(r: httpx.Response, endpoint: str) -> str | None:
    """The ``rel="next"`` link of ``r`` if it stays on ``endpoint`` and on ``r``'s path."""
    try:
        link = r.links.get("next", {}).get("url")
    except (ValueError, IndexError):  # a malformed header: no next page
        return None
    if not link:
        return None
    try:
        nxt = r.url.join(link)
    except httpx.InvalidURL:
        nxt = None
    base = httpx.URL(endpoint)
    if (
        nxt is None
        or (nxt.scheme, nxt.host, nxt.port) != (base.scheme, base.host, base.port)
        or nxt.path != r.url.path
    ):
        log.warning("not following the Hub's next page %r from %s", link[:200], r.url.path)
        return None
    return str(nxt)


class Bounds:
    """Requests, time and cancellation for one job's client (see the module doc)."""

    def __init__(self, requests: int, deadline: float) -> None:
        self.left = requests
        self.deadline = deadline  # time.monotonic()
        self.spent = 0
        self._cancelled = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def spend(self) -> float:
        """Count one request; the seconds it may take.  ``Stopped`` when none is allowed."""
        with self._lock:
            if self._cancelled:
                raise Stopped("the search was stopped", status=504)
            left = self.remaining()
            if left <= 0:
                raise Stopped("the search deadline passed", status=504)
            if self.left <= 0:
                raise Stopped(f"the search's {self.spent} Hub requests are spent", status=504)
            self.left -= 1
            self.spent += 1
            return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self._cancelled:
                _shut(sock)
            else:
                self._sockets.append(sock)

    def cancel(self) -> None:
        """No more requests; answers being read end now (their sockets are shut down)."""
        with self._lock:
            self._cancelled = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it; close() would not
    except OSError:
        pass  # already closed


def bounded_client(bounds: Bounds, timeout: httpx.Timeout) -> httpx.Client:
    """An ``httpx.Client`` that follows redirects and spends ``bounds`` (each hop counts)."""

    def on_request(request: httpx.Request) -> None:
        left = bounds.spend()
        # No single wait (connect, pool, a read) may outlast the job's deadline.
        t = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            k: left if v is None else min(v, left) for k, v in t.items()
        } or {"connect": left, "read": left, "write": left, "pool": left}

    def on_response(response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            bounds.watch(sock)

    return httpx.Client(
        follow_redirects=True,
        timeout=timeout,
        verify=tls.context(),
        event_hooks={"request": [on_request], "response": [on_response]},
    )
