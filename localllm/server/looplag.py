"""How long the daemon's event loop was kept from running: sampled, kept a minute, exported.

A timer is due every ``INTERVAL`` seconds; each time it runs it notes how late
it ran.  A late timer means the loop was busy (a route doing CPU work inline, a C
call holding the GIL in another thread) or the process was not scheduled: both
are what a client waiting on ``/health`` or on its next token feels.  With a
5 ms interval a stall is measured to within 5 ms, at a cost of 200 short
callbacks a second.

``/metrics`` exports the largest lag and the 99th percentile over the last
``WINDOW`` seconds (``localllm_event_loop_lag_max_seconds`` /
``..._p99_seconds``), so operators see a stall after the fact, and the test
suite's standing guard reads the same numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

INTERVAL = 0.005
WINDOW = 60.0


class LoopLag:
    """Samples one event loop's lag once started; ``stats`` summarises the last minute."""

    def __init__(self, interval: float = INTERVAL, window: float = WINDOW) -> None:
        self.interval = interval
        self.window = window
        # (monotonic time, lag in seconds); 12,000 entries at the defaults.
        self._samples: deque[tuple[float, float]] = deque()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self) -> None:
        """Start sampling the running loop (idempotent)."""
        if self._handle is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._schedule(time.monotonic())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._handle = self._loop.call_later(self.interval, self._tick, now + self.interval)

    def _tick(self, due: float) -> None:
        now = time.monotonic()
        self._samples.append((now, max(0.0, now - due)))
        cutoff = now - self.window
        while self._samples and self._samples[0][0] < cutoff:
            self._samples.popleft()
        self._schedule(now)

    def stats(self) -> tuple[float, float]:
        """(max, p99) lag in seconds over the window; (0, 0) before any sample."""
        cutoff = time.monotonic() - self.window
        # One C-level copy: /metrics reads from a worker thread while the loop appends.
        samples = list(self._samples)
        lags = sorted(lag for when, lag in samples if when >= cutoff)
        if not lags:
            return 0.0, 0.0
        return lags[-1], lags[min(len(lags) - 1, int(len(lags) * 0.99))]


class LoopLagCollector(Collector):
    """Exports a ``LoopLag``'s summary at scrape time."""

    def __init__(self, lag: LoopLag) -> None:
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        worst, p99 = self.lag.stats()
        yield GaugeMetricFamily(
            "localllm_event_loop_lag_max_seconds",
            f"Largest delay of the daemon's event loop over the last {WINDOW:.0f} s.",
            value=worst,
        )
        yield GaugeMetricFamily(
            "localllm_event_loop_lag_p99_seconds",
            f"99th percentile delay of the daemon's event loop over the last {WINDOW:.0f} s.",
            value=p99,
        )
