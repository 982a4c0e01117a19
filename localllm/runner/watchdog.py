"""Daemon side of the runner watchdog: notice a runner that shows no sign of life.

A runner child sends a ``beat`` frame every ``interval`` seconds from a thread
of its own (``worker.Heartbeat``), also while its main thread sits in a long
native call: cffi releases the GIL around ``llama_decode`` and the model load.
So silence does not mean "busy", it means the whole process is stopped
(SIGSTOP) or frozen (a native call holding the GIL, a hung driver in the
kernel).  Any frame counts as a sign of life.

``Watchdog`` owns the bookkeeping and the watching loop; ``RunnerProcess``
owns what happens on silence (kill the child: SIGKILL works on a stopped
process, then fail its requests as for any crash).  A beat also carries how
long the main thread has been inside its current step or call.  A step can
hang while the heartbeat thread keeps beating (a native deadlock that released
the GIL, a GPU driver that never returns), so one step that runs past
``STEP_FACTOR`` times the slowest step seen, and at least ``STEP_FLOOR``
times the silence bound, also gets the runner killed: a big prefill chunk of
a large model on a CPU can take minutes, but not many times its slowest.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from localllm.runner.frames import Frame

log = logging.getLogger("localllm.runner")

# At most one beat a second (an idle runner costs nothing), and at least eight
# per bound, so one late beat (a busy machine) never trips it.
MAX_INTERVAL_S = 1.0
BEATS_PER_BOUND = 8
# While a runner is being closed it should exit within moments; this many
# missed beats then mean it is stopped, and it is killed instead of waited for.
CLOSE_MISSED_BEATS = 4
# A stuck step: past STEP_FACTOR x the slowest step seen and STEP_FLOOR x the bound
# (300 s for the default 30 s).  The first step has no history: the floor rules.
STEP_FACTOR = 8.0
STEP_FLOOR = 10.0


def heartbeat_interval(timeout: float) -> float:
    """Seconds between the child's beats for a silence bound of ``timeout``."""
    if not enabled(timeout):
        return MAX_INTERVAL_S
    return max(0.02, min(MAX_INTERVAL_S, timeout / BEATS_PER_BOUND))


def enabled(timeout: float) -> bool:
    return math.isfinite(timeout) and timeout > 0


class Watchdog:
    """When a runner was last heard from, and a loop that acts on silence."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.interval = heartbeat_interval(timeout)
        self.last = time.monotonic()
        self.busy_s = 0.0  # how long the child's main thread is in its current step
        self.slowest_s = 0.0  # the longest step (or load) seen to finish

    @property
    def enabled(self) -> bool:
        return enabled(self.timeout)

    def saw(self, msg: Frame) -> None:
        """A frame arrived: the child is alive."""
        self.last = time.monotonic()
        if msg["type"] == "beat":
            busy = float(msg["busy_ms"]) / 1000.0
            if busy < self.busy_s:  # the previous step ended; a new one (or idleness) began
                self.slowest_s = max(self.slowest_s, self.busy_s)
            self.busy_s = busy

    def step_bound(self) -> float:
        """How long one step may run before the runner counts as stuck."""
        return max(STEP_FLOOR * self.timeout, STEP_FACTOR * self.slowest_s)

    def silent_for(self) -> float:
        return time.monotonic() - self.last

    async def watch(
        self,
        on_silence: Callable[[float], None],
        *,
        pid: int,
        timeout: float | None = None,
        on_stuck: Callable[[float], None] | None = None,
    ) -> None:
        """Call ``on_silence(seconds)`` once the child is silent past ``timeout``, or
        ``on_stuck(seconds)`` once one step runs past ``step_bound()``; then return."""
        bound = self.timeout if timeout is None else timeout
        if not enabled(bound):
            return
        step = min(self.interval, bound / 2)
        expected = time.monotonic() + step
        while True:
            await asyncio.sleep(step)
            now = time.monotonic()
            late = now - expected
            expected = now + step
            if late > step:
                # The daemon's own event loop was stalled: beats may sit unread
                # in the pipe.  Let the reader catch up before judging the child.
                continue
            silence = now - self.last
            if silence > bound:
                on_silence(silence)
                return
            if on_stuck is not None and self.enabled and self.busy_s > self.step_bound():
                log.error(
                    "runner %d has been inside one engine step for %.0fs (its heartbeat "
                    "runs, so a native call is stuck)",
                    pid,
                    self.busy_s,
                )
                on_stuck(self.busy_s)
                return
