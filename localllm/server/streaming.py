"""NDJSON streaming: run blocking work in a thread and stream its events to the client.

``events_from_thread`` bridges a synchronous producer (a pull, later a
generation) to an async iterator; when the consumer stops early (the client
went away, or the response was cancelled) it sets the producer's cancel event
so the work stops too.  ``ndjson_response`` turns events into
``application/x-ndjson`` lines, with a failure after the first line reported
as a final ``{"error": "..."}`` line under HTTP 200, as Ollama does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localllm.errors import LocalLLMError

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
Emit = Callable[[dict[str, Any]], None]
Work = Callable[[Emit, threading.Event], Any]

_DONE = object()
# How often a quiet stream checks whether its client is still there.
_DISCONNECT_POLL_S = 0.5


def ndjson_line(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def error_message(exc: BaseException) -> str:
    if isinstance(exc, LocalLLMError):
        return exc.message
    return str(exc) or type(exc).__name__


async def events_from_thread(
    work: Work, *, request: Request | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Run ``work(emit, cancel)`` in a daemon thread and yield what it emits.

    An exception raised by ``work`` is re-raised here after the events before
    it.  Closing the iterator early, or the client disconnecting, sets
    ``cancel``; the thread is left to notice it and finish on its own.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    cancel = threading.Event()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # loop closed: nobody is listening any more
            cancel.set()

    def emit(event: dict[str, Any]) -> None:
        put(("event", event))

    def run() -> None:
        try:
            result = work(emit, cancel)
            put(("done", result))
        except BaseException as exc:
            put(("error", exc))

    thread = threading.Thread(target=run, name="localllm-work", daemon=True)
    thread.start()
    try:
        while True:
            try:
                kind, value = await asyncio.wait_for(queue.get(), _DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    log.info("client went away; cancelling %s", request.url.path)
                    return
                continue
            if kind == "event":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        cancel.set()


async def run_to_completion(work: Work) -> list[dict[str, Any]]:
    """Run ``work`` in a thread and collect its events (for ``stream: false``)."""
    return [event async for event in events_from_thread(work)]


async def _lines(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield ndjson_line(event)
    except LocalLLMError as exc:
        yield ndjson_line({"error": exc.message})
    except Exception as exc:
        log.exception("stream failed")
        yield ndjson_line({"error": error_message(exc)})
    finally:
        closer = getattr(events, "aclose", None)
        if closer is not None:
            await closer()


async def ndjson_response(
    events: AsyncIterator[dict[str, Any]], *, status_code: int = 200
) -> StreamingResponse:
    """Stream ``events`` as NDJSON.

    The first event is awaited before the response starts, so an error raised
    before any progress (an unknown model, an invalid name) still becomes a
    proper HTTP status through the app's exception handlers.
    """
    try:
        first = await events.__anext__()
    except StopAsyncIteration:
        first = None

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield ndjson_line(first)
        async for line in _lines(events):
            yield line

    return StreamingResponse(body(), status_code=status_code, media_type=NDJSON)


async def progress_response(events: AsyncIterator[dict[str, Any]], stream: bool) -> Response:
    """A progress stream (pull, create) as NDJSON, or only its last status when not streaming."""
    if stream:
        return await ndjson_response(events)
    last: dict[str, Any] = {"status": "success"}
    async for event in events:
        last = event
    return JSONResponse(last)
