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

Generations must stop when their client leaves, whether or not anything is
being sent: while a request waits for a slot, before its first token, or while
a ``stream: false`` request is being folded nothing is written, so a write
error can't tell.  ``until_disconnect`` (one result) and ``guarded`` (a
stream) therefore run the work in a task of its own beside a watcher of the
ASGI receive channel; the ``http.disconnect`` message cancels the task, which
unwinds the generation (the runner is told to cancel, the scheduler slot is
released) and raises ``ClientGone``.  Routes answer that with
``gone_response()`` (nobody reads it; the access log shows 499).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localllm.compat.frames import FrameStream
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.server.middleware import internal_error

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
JSONObject = Mapping[str, Any]  # an NDJSON line: any of api.wire's shapes, or a plain dict
Emit = Callable[[JSONObject], None]
Work = Callable[[Emit, threading.Event], Any]

T = TypeVar("T")
_DONE = object()
_GONE = ("gone", None)
# How often a quiet stream checks whether its client is still there.
_DISCONNECT_POLL_S = 0.5
# nginx's "client closed request": never seen by the client, only in our access log and metrics.
GONE_STATUS = 499


class ClientGone(Exception):
    """The client disconnected before the work was done; the work was cancelled."""


def gone_response() -> Response:
    return Response(status_code=GONE_STATUS)


async def _disconnected(request: Request) -> None:
    """Return when the ASGI server says the client has gone (``http.disconnect``)."""
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass  # body messages: the route has already read what it needs
    except Exception as exc:
        # A receive channel that fails tells nothing about the client: stop watching,
        # never cancel the work for it.
        log.debug("not watching for a disconnect: %s", exc)
        await asyncio.Event().wait()


async def _finish(*tasks: asyncio.Future[Any]) -> None:
    """Cancel what is still running and wait until it has cleaned up."""
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)


async def until_disconnect(request: Request | None, work: Awaitable[T]) -> T:
    """Await ``work`` in a task; cancel it and raise ``ClientGone`` if the client leaves first."""
    task = asyncio.ensure_future(work)
    if request is None:
        return await task
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this request itself is cancelled (shutdown): take the work along
        await _finish(task, watcher)
    if task.cancelled():
        log.info("client went away; cancelled %s", request.url.path)
        raise ClientGone
    return task.result()


async def guarded(events: AsyncIterator[T], request: Request | None
                  ) -> AsyncGenerator[T, None]:
    """Iterate ``events`` in a task of its own and yield what it yields.

    The client disconnecting cancels that task and raises ``ClientGone`` here,
    even while ``events`` yields nothing (waiting for a slot, loading, a slow
    first token).  Closing this generator cancels the task too.  Every step of
    ``events`` runs in the one task, so context managers inside it (the
    scheduler's slot) enter and exit in the same task.
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in events:
                queue.put_nowait(("item", item))
            queue.put_nowait(("end", None))
        except Exception as exc:
            queue.put_nowait(("error", exc))
        finally:
            closer = getattr(events, "aclose", None)
            if closer is not None:
                await closer()

    task = asyncio.ensure_future(pump())
    pending: list[asyncio.Future[Any]] = [task]
    if request is not None:
        watcher = asyncio.ensure_future(_disconnected(request))
        watcher.add_done_callback(lambda w: None if w.cancelled() else queue.put_nowait(_GONE))
        pending.append(watcher)
    try:
        while True:
            if not queue.empty():
                # Let the loop run once between writes that would not wait: a lost
                # connection is reported by a callback, and until it runs every write
                # to the dead socket logs an asyncio warning.
                await asyncio.sleep(0)
            kind, value = await queue.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            elif kind == "gone":
                assert request is not None
                log.info("client went away; cancelling %s", request.url.path)
                raise ClientGone
            else:
                return
    finally:
        await _finish(*pending)


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
    events: AsyncIterator[JSONObject], *, status_code: int = 200,
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


async def sse_response(request: Request, events: AsyncIterator[T],
                       shaper: FrameStream[T]) -> Response:
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

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})
