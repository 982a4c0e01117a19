"""Waiting for a runner's model load: LOCALLLM_LOAD_TIMEOUT bounds a stall, not the whole load.

Ollama's OLLAMA_LOAD_TIMEOUT (5 minutes by default) starts again whenever the
load shows activity, so a large model on a slow disk loads however long that
takes, and only a load that stops moving is given up.  Ours means the same.
Activity is the child reading more of its files or holding more memory than at
any moment before (from ``/proc/<pid>/io`` and ``status``: ``read()`` calls add
to ``rchar``, pages of mapped weights fetched from disk to ``read_bytes`` and,
as they are touched, to the resident set), or writing a log line.  Only new
highs count, so a stuck process whose memory jitters does not look busy.
Without ``/proc`` (macOS) the timeout bounds the whole load, as it did before.
A frozen child is also caught sooner by the watchdog (LOCALLLM_RUNNER_TIMEOUT).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from localllm.runner.resident import rss_bytes

T = TypeVar("T")
POLL_S = 1.0  # how often the child's counters are read while it loads


def activity(pid: int) -> tuple[int, ...] | None:
    """(bytes read, bytes fetched from storage, resident bytes) of ``pid``; None without /proc."""
    rss = rss_bytes(pid)
    read = fetched = 0
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        read, fetched = int(fields["rchar"]), int(fields["read_bytes"])
    except (OSError, ValueError, KeyError):
        if rss is None:
            return None
    return read, fetched, rss or 0


async def wait_loaded(
    reply: Coroutine[Any, Any, T],
    pid: int,
    timeout: float,
    *,
    last_output: Callable[[], float],
    poll: float = POLL_S,
) -> T:
    """``reply``'s result, or ``TimeoutError`` once ``timeout`` seconds pass without activity.

    ``last_output`` gives the ``time.monotonic()`` of the child's latest log line.  The
    reply is cancelled when this gives up or is cancelled itself.
    """
    task = asyncio.ensure_future(reply)
    if math.isinf(timeout):
        return await task
    best = activity(pid)
    since = time.monotonic()
    try:
        while True:
            left = since + timeout - time.monotonic()
            if left <= 0:
                raise TimeoutError
            done, _ = await asyncio.wait({task}, timeout=min(poll, left))
            if done:
                return task.result()
            mark = activity(pid)
            if (
                best is not None
                and mark is not None
                and any(m > b for m, b in zip(mark, best, strict=True))
            ):
                best = tuple(max(m, b) for m, b in zip(mark, best, strict=True))
                since = time.monotonic()
            since = max(since, last_output())
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
