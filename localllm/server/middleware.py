"""The outermost request layer: request ids, access log, metrics, body limits and draining.

For every HTTP request it

* takes the client's ``X-Request-ID`` (when sane) or makes one, echoes it in the
  response and puts it in the logging context;
* refuses new work with 503 ``server is shutting down`` while the daemon
  drains (``/``, the health probes and ``/metrics`` still answer), and counts requests in
  flight so the drain knows when it is done;
* caps request bodies: ``LOCALLLM_MAX_BODY`` for everything, the larger
  ``LOCALLLM_MAX_BLOB_SIZE`` for ``/api/blobs/…`` uploads — a declared
  ``Content-Length`` over the cap is refused before the route runs, a chunked
  body is cut off as soon as it passes the cap;
* records the request in the metrics and writes one access log line (method,
  route, status, time, the label of the API key it carried — never the key, nor
  the body unless ``LOCALLLM_DEBUG``);
* keeps the connection usable after a crash: Starlette re-raises an unexpected
  exception even after its 500 went out, and uvicorn answers that by closing
  the socket — a keep-alive client's next request then meets ECONNRESET.  So an
  exception before any response becomes a JSON 500 here, one after a complete
  response is only logged.  The 500 says only "internal error" and the request
  id (``internal_error``): an exception's text can carry paths of the user's
  home or a model's file names; it goes to the log, under that id.

A pure ASGI middleware, so streaming responses pass through untouched.
"""

from __future__ import annotations

import logging
import time
from typing import NotRequired, TypedDict

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localllm.errors import LocalLLMError
from localllm.server.apikeys import SCOPE_KEY_LABEL
from localllm.server.errorbody import error_doc, send_error
from localllm.server.health import SHUTTING_DOWN, Lifecycle
from localllm.server.logs import new_request_id, request_id
from localllm.server.metrics import Metrics

access_log = logging.getLogger("localllm.access")
log = logging.getLogger("localllm.server")

# Still answered while draining: probes and scrapes must see the drain, not a refusal.
_LIVENESS = frozenset({"/", "/health", "/health/ready", "/metrics"})
_QUIET = frozenset({"/health", "/health/ready", "/metrics"})  # probes: DEBUG, not INFO
_BLOB_PREFIX = "/api/blobs/"
_DEBUG_BODY_BYTES = 4096
# The request's id in its ASGI scope, for error handlers that run outside this
# middleware (Starlette's ServerErrorMiddleware), after the context variable is reset.
SCOPE_REQUEST_ID = "localllm.request_id"


def internal_error(rid: str | None = None) -> str:
    """What a client is told about an unexpected failure: nothing but where to look."""
    return (
        f"internal error (request id {rid or request_id.get()}); the daemon's log has the details"
    )


class AccessLine(TypedDict):
    """The fields of one access-log line (``extra`` of its record)."""

    request_id: str
    method: str
    path: str
    status: int
    duration_ms: float
    client: str
    key_label: NotRequired[str]  # the API key's label (apikeys.py), when one was needed
    body: NotRequired[str]  # LOCALLLM_DEBUG only: the start of the request body


class BodyTooLarge(LocalLLMError):
    status = 413


class RequestMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        lifecycle: Lifecycle,
        metrics: Metrics,
        max_body: int,
        max_blob: int,
        debug: bool = False,
    ) -> None:
        self.app = app
        self.lifecycle = lifecycle
        self.metrics = metrics
        self.max_body = max_body
        self.max_blob = max_blob
        self.debug = debug

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        rid = new_request_id(headers.get("x-request-id"))
        token = request_id.set(rid)
        scope[SCOPE_REQUEST_ID] = rid
        path: str = scope["path"]
        status = [0]
        done = [False]
        start = time.perf_counter()
        raw_header = (b"x-request-id", rid.encode())

        async def send_tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), raw_header]}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                done[0] = True
            await send(message)

        counted = path not in _QUIET
        if counted:
            self.lifecycle.in_flight += 1
            self.metrics.in_flight.inc()
        body_seen = bytearray()
        try:
            if self.lifecycle.draining and path not in _LIVENESS:
                await _refuse(send_tagged, path, 503, SHUTTING_DOWN, close=True)
                return
            limit = self.max_blob if path.startswith(_BLOB_PREFIX) else self.max_body
            declared = _content_length(headers)
            if limit and declared is not None and declared > limit:
                await _refuse(send_tagged, path, 413, _too_large(limit), close=True)
                return
            keep = self.debug and not path.startswith(_BLOB_PREFIX)
            try:
                await self.app(
                    scope, _capped(receive, limit, body_seen if keep else None), send_tagged
                )
            except Exception:
                if done[0]:
                    log.exception("%s %s failed after answering", scope["method"], path)
                    return  # answered in full; see the module docstring
                if status[0]:
                    raise  # half-sent: only closing the connection can say so
                # Starlette's error handler sits outside this middleware: answer here,
                # or it would answer and then re-raise into uvicorn (see above).
                log.exception("%s %s crashed", scope["method"], path)
                await _refuse(send_tagged, path, 500, internal_error(rid), close=False)
        finally:
            if counted:
                self.lifecycle.in_flight -= 1
                self.metrics.in_flight.dec()
            # No response started means the app crashed: the server answers 500.
            code = status[0] or 500
            seconds = time.perf_counter() - start
            self.metrics.observe_request(
                scope["method"], _endpoint(scope), code, seconds, scope.get(SCOPE_KEY_LABEL, "")
            )
            self._log(scope, code, seconds, bytes(body_seen))
            request_id.reset(token)

    def _log(self, scope: Scope, status: int, seconds: float, body: bytes) -> None:
        path = scope["path"]
        level = logging.DEBUG if path in _QUIET else logging.INFO
        if not access_log.isEnabledFor(level):
            return
        client = scope.get("client") or ("-", 0)
        extra: AccessLine = {
            "request_id": request_id.get(),
            "method": scope["method"],
            "path": path,
            "status": status,
            "duration_ms": round(seconds * 1000, 1),
            "client": client[0],
        }
        if label := scope.get(SCOPE_KEY_LABEL):
            extra["key_label"] = label
        if body:
            # Only with LOCALLLM_DEBUG: this is where prompts would appear.
            extra["body"] = body[:_DEBUG_BODY_BYTES].decode("utf-8", "replace")
        access_log.log(
            level, "%s %s %d %.1fms", scope["method"], path, status, seconds * 1000, extra=extra
        )


def _capped(receive: Receive, limit: int, keep: bytearray | None) -> Receive:
    seen = [0]

    async def wrapped() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            seen[0] += len(chunk)
            if limit and seen[0] > limit:
                raise BodyTooLarge(_too_large(limit))
            if keep is not None and len(keep) < _DEBUG_BODY_BYTES:
                keep.extend(chunk[: _DEBUG_BODY_BYTES - len(keep)])
        return message

    return wrapped


def _too_large(limit: int) -> str:
    return f"request body too large (limit {limit} bytes)"


def _content_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None  # the server rejects a malformed length itself


def _endpoint(scope: Scope) -> str:
    # The route's template keeps the label set small; unknown paths share one label
    # so a scanner probing random URLs cannot grow the metrics without bound.
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


async def _refuse(send: Send, path: str, status: int, message: str, *, close: bool) -> None:
    status, doc = error_doc(path, status, message)
    headers = []
    if close:
        # The client may still be sending a body we will not read.
        headers.append((b"connection", b"close"))
    if status in (503, 529):  # 529: 503 in Anthropic's words
        headers.append((b"retry-after", b"5"))
    await send_error(send, status, doc, headers)
