"""The work stops when its client leaves: ``until_disconnect``, ``guarded``, ``ClientGone``.

Generations must stop when their client leaves, whether or not anything is
being sent: while a request waits for a slot, before its first token, or while
a ``stream: false`` request is being folded nothing is written, so a write
error can't tell.  ``until_disconnect`` (one result: ``jsonout.json_result``)
and ``guarded`` (a stream: the pumps of ``streaming.py``) therefore run the
work in a task of its own beside a watcher of the ASGI receive channel; the
``http.disconnect`` message cancels the task, which unwinds the generation
(the runner is told to cancel, the scheduler slot is released) and raises
``ClientGone``.  Routes answer that with ``gone_response()`` (nobody reads it;
the access log shows 499).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

log = logging.getLogger(__name__)

T = TypeVar("T")
_GONE = ("gone", None)
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


async def guarded(events: AsyncIterator[T], request: Request | None) -> AsyncGenerator[T, None]:
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
