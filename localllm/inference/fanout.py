"""Run several chunk streams at once (OpenAI's ``n`` choices) and interleave their chunks.

Each stream is driven by its own task, so the ``n`` generations reach the
scheduler together and share the model's slots (continuous batching), rather
than one after another.  Closing the merged iterator early — the client went
away — cancels every task, which cancels their generations and frees their slots.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

_END = object()
T = TypeVar("T")  # a chunk: the native API's, whichever it is


async def merge(streams: Sequence[AsyncGenerator[T, None]]) -> AsyncGenerator[tuple[int, T], None]:
    """Yield ``(index, chunk)`` from all ``streams`` as they come; the first error is raised."""
    if len(streams) == 1:  # the common case needs no tasks
        try:
            async for chunk in streams[0]:
                yield 0, chunk
        finally:
            await streams[0].aclose()
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def drive(index: int, stream: AsyncGenerator[T, None]) -> None:
        try:
            async for chunk in stream:
                await queue.put((index, chunk))
            await queue.put((index, _END))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await queue.put((index, exc))

    tasks = [asyncio.ensure_future(drive(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            index, item = await queue.get()
            if item is _END:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)


async def gather(streams: Sequence[AsyncGenerator[T, None]]) -> list[list[T]]:
    """Every chunk of every stream, run concurrently, grouped by stream."""
    out: list[list[T]] = [[] for _ in streams]
    async for index, chunk in merge(streams):
        out[index].append(chunk)
    return out
