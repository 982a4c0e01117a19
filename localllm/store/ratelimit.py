"""Bandwidth caps for downloads: token buckets that the bytes of a download draw from.

Two caps apply, each one bucket: ``LOCALLLM_MAX_DOWNLOAD_RATE``, shared by every
download of the process (all pulls of a daemon, all their files and parts,
backend packs too), and a pull's own ``max_rate`` (``pull --max-rate``), shared
by that pull's files.  A download takes each chunk it has written from both, so
the slower cap wins.

A bucket lives as long as its pull (or, the shared one, as long as its setting
keeps its value), not as long as one HTTP request: a download resumed after a
network error goes on at the same rate instead of starting with a fresh burst.
It starts empty when first drawn from and holds at most ``BURST_S`` of its
rate, so an idle pause earns little.  Taking more than the bucket holds is
allowed and sleeps the debt off (chunks are up to 64 KiB whatever the rate);
threads drawing at once queue their debts, so together they keep to the rate.
The rate is what is read from the connection: the kernel's receive buffer lets
the first few hundred KiB of a transfer arrive before the cap slows the sender
(TCP flow control).
"""

from __future__ import annotations

import threading
import time

from localllm import config

BURST_S = 0.25  # the most a bucket holds: this many seconds of its rate


class Bucket:
    """A token bucket of ``rate`` bytes per second (``rate`` > 0)."""

    def __init__(self, rate: int) -> None:
        if rate <= 0:
            raise ValueError("a rate must be positive")
        self.rate = rate
        self._tokens = 0.0
        self._stamp: float | None = None  # of the last take: the first one starts the clock
        self._lock = threading.Lock()

    def take(self, n: int, abort: threading.Event | None = None) -> bool:
        """Take ``n`` bytes' worth, sleeping until the rate allows them; False if
        ``abort`` was set meanwhile (the caller stops)."""
        with self._lock:
            now = time.monotonic()
            earned = (now - (now if self._stamp is None else self._stamp)) * self.rate
            self._tokens = min(self.rate * BURST_S, self._tokens + earned) - n
            self._stamp = now
            wait = -self._tokens / self.rate
        if wait <= 0:
            return True
        if abort is None:
            time.sleep(wait)
            return True
        return not abort.wait(wait)


_shared_lock = threading.Lock()
_shared: Bucket | None = None


def shared() -> Bucket | None:
    """The process-wide bucket of ``LOCALLLM_MAX_DOWNLOAD_RATE``, or None when unset or 0.

    Read when a download starts: a changed value gives a new bucket for the
    downloads that start afterwards."""
    global _shared
    rate = config.MAX_DOWNLOAD_RATE.get()
    with _shared_lock:
        if not rate:
            _shared = None
        elif _shared is None or _shared.rate != rate:
            _shared = Bucket(rate)
        return _shared


def for_pull(max_rate: int | None) -> Bucket | None:
    """A pull's own bucket, shared by its files: None when ``max_rate`` is 0 or None."""
    return Bucket(max_rate) if max_rate else None
