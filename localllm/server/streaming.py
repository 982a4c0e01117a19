"""The response pumps: NDJSON for the native API, server-sent events for the ``/v1`` ones.

``events_from_thread`` bridges a synchronous producer (a pull, later a
generation) to an async iterator; when the consumer stops early (the client
went away, or the response was cancelled) it sets the producer's cancel event
so the work stops too.  ``ndjson_response`` turns events into
``application/x-ndjson`` lines, with a failure after the first line reported
as a final ``{"error": "..."}`` line under HTTP 200, as Ollama does.
``sse_response`` is the one SSE pump: the foreign API's stream class (see
:class:`localllm.compat.frames.FrameStream`) turns each native item into
frames, and a failure after the first frame into that API's error events.
Both await the first item before answering, so a failure before it (a full
queue, a failed load) keeps its HTTP status through the app's handlers.

Given the request, a pump runs its items through ``guarded``
(``server/disconnect.py``): a client that leaves cancels the work even while
nothing is being written.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localllm.compat.frames import FrameStream
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.server.disconnect import ClientGone, gone_response, guarded
from localllm.server.middleware import internal_error

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
JSONObject = Mapping[str, Any]  # an NDJSON line: any of api.wire's shapes, or a plain dict
Emit = Callable[[JSONObject], None]
Work = Callable[[Emit, threading.Event], Any]

T = TypeVar("T")
# How often a quiet thread's stream checks whether its client is still there.
_DISCONNECT_POLL_S = 0.5


def ndjson_line(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def error_message(exc: BaseException) -> str:
    if isinstance(exc, LocalLLMError):
        return exc.message
    return internal_error()  # the detail is in the log, under the request id


async def events_from_thread(
    work: Work, *, request: Request | None = None
) -> AsyncIterator[JSONObject]:
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

    def emit(event: JSONObject) -> None:
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
            except TimeoutError:
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


async def _lines(events: AsyncIterator[JSONObject]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield ndjson_line(event)
    except ClientGone:
        return  # nobody to tell
    except LocalLLMError as exc:
        yield ndjson_line({"error": exc.message})
    except Exception as exc:
        log.exception("stream failed")
        yield ndjson_line({"error": error_message(exc)})
    finally:
        closer = getattr(events, "aclose", None)
        if closer is not None:
            await closer()


async def first_of(items: AsyncGenerator[T, None]) -> T | None:
    """The first item (None when there is none); on any failure ``items`` is closed."""
    try:
        return await items.__anext__()
    except StopAsyncIteration:
        return None
    except BaseException:
        await items.aclose()
        raise


async def ndjson_response(
    events: AsyncIterator[JSONObject],
    *,
    status_code: int = 200,
    request: Request | None = None,
) -> Response:
    """Stream ``events`` as NDJSON; with ``request``, its client leaving cancels them.

    The first event is awaited before the response starts, so an error raised
    before any progress (an unknown model, an invalid name) still becomes a
    proper HTTP status through the app's exception handlers.
    """
    if request is not None:
        events = guarded(events, request)
        try:
            first = await first_of(events)
        except ClientGone:
            return gone_response()
    else:
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


async def progress_response(events: AsyncIterator[JSONObject], stream: bool) -> Response:
    """A progress stream (pull, create) as NDJSON, or only its last status when not streaming."""
    if stream:
        return await ndjson_response(events)
    last: JSONObject = {"status": "success"}
    async for event in events:
        last = event
    return JSONResponse(last)


async def sse_response(
    request: Request, events: AsyncIterator[T], shaper: FrameStream[T]
) -> Response:
    """Stream ``events`` as server-sent events, each turned into frames by ``shaper``.

    The client leaving cancels ``events`` (see ``guarded``); a failure after the
    first frame is logged and sent as ``shaper.fail``'s frames.
    """
    items = guarded(events, request)
    try:
        first = await first_of(items)
    except ClientGone:
        return gone_response()

    async def body() -> AsyncIterator[str]:
        try:
            for frame in shaper.start():
                yield frame
            item = first
            while item is not None:
                for frame in shaper.feed(item):
                    yield frame
                item = await first_of(items)
            for frame in shaper.end():
                yield frame
        except ClientGone:
            pass  # nobody to tell
        except Exception as exc:
            if not isinstance(exc, InvalidRequest):
                log.warning("%s stream failed: %s", type(shaper).__name__, exc)
            for frame in shaper.fail(exc):
                yield frame
        finally:
            await items.aclose()

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
