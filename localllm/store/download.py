"""Download one blob into the store: stream, hash while writing, resume, retry, cap, verify.

Bytes go to ``blobs/sha256-<hex>-partial`` and are hashed as they arrive, so a
fresh download is never read twice.  After an interruption the next attempt
re-hashes the partial prefix once and asks for the rest with ``Range``.  The
blob appears under its final name only when the sha256 matches; a mismatch
deletes the partial and raises ``DigestMismatch``.

A network error (connection reset, timeout, a failed DNS lookup), a 429 or a 5xx is
retried from where the bytes stopped, after ``backoff(n)`` (1, 2, 4, 8, then 10 s), up
to ``RETRIES`` times in a row; an attempt that gained bytes starts the count again.
Each retry is told to the callers (``notice``), and the last failure is a
``PullError`` naming the attempts, the waits and what is kept for the next pull.
Bytes are drawn from the bandwidth caps (``store/ratelimit.py``) as they are
written: the process-wide one and the pull's own, both kept across those retries.

Concurrent pulls of the same blob (threads of one daemon) share one download:
a registry keyed by the partial's path holds the in-flight download, each
caller polls its progress (which also throttles progress events to ~60 ms),
and the download is abandoned, partial kept, when every caller has cancelled.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

import httpx

from localllm import tls
from localllm.errors import DigestMismatch, LocalLLMError, ModelNotFound, PullError
from localllm.format import format_bytes
from localllm.store import ratelimit
from localllm.store.blobs import CHUNK, BlobStore

RETRIES = 6  # failed attempts in a row, after the first, before giving up
BACKOFF_S = 1.0  # doubled per consecutive failure, capped at BACKOFF_MAX_S
BACKOFF_MAX_S = 10.0
PROGRESS_INTERVAL_S = 0.06
TIMEOUT = httpx.Timeout(30.0, connect=10.0)

Progress = Callable[[int], None]
Notice = Callable[[str], None]


def backoff(failures: int) -> float:
    """Seconds to wait before the retry that follows ``failures`` failures in a row."""
    return float(min(BACKOFF_S * 2 ** (failures - 1), BACKOFF_MAX_S))


class _Retry(Exception):
    """A failure worth another attempt (network error, 429, 5xx)."""


def cancelled() -> PullError:
    return PullError("pull cancelled", status=499)


def _why(exc: BaseException) -> str:
    """A network failure in a few words: what happened, then httpx's own text."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({text})"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text})"
    if isinstance(exc, httpx.TransportError):
        return f"connection lost ({text})"
    return text


class _Download:
    def __init__(
        self,
        blobs: BlobStore,
        digest: str,
        size: int,
        url: str,
        headers: dict[str, str],
        limit: ratelimit.Bucket | None,
    ) -> None:
        self.blobs, self.digest, self.size, self.url = blobs, digest, size, url
        self.headers = {**headers, "Accept-Encoding": "identity"}
        self.buckets = [b for b in (ratelimit.shared(), limit) if b is not None]
        self.notes: list[str] = []  # one line per retry, for the callers' ``notice``
        self.completed = 0  # bytes written and hashed so far
        self.h = hashlib.sha256()
        self.users = 0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.abort = threading.Event()

    def run(self) -> None:
        try:
            self._fetch()
        except BaseException as exc:  # handed to every waiting caller
            self.error = exc
        finally:
            with _lock:
                if _inflight.get(self.key) is self:
                    del _inflight[self.key]
            self.done.set()

    @property
    def key(self) -> str:
        return str(self.blobs.partial_path(self.digest))

    def _resume_point(self, h: hashlib._Hash) -> int:
        partial = self.blobs.partial_path(self.digest)
        try:
            have = partial.stat().st_size
        except FileNotFoundError:
            return 0
        if have > self.size:
            return 0
        with open(partial, "rb") as fh:
            left = have
            while left and (chunk := fh.read(min(CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
        return have - left

    def _fetch(self) -> None:
        partial = self.blobs.partial_path(self.digest)
        partial.parent.mkdir(parents=True, exist_ok=True)
        # Progress lives on self: an attempt cut mid-stream keeps what it wrote and hashed.
        self.h = hashlib.sha256()
        self.completed = self._resume_point(self.h)
        failures = 0
        waits: list[float] = []  # before each retry of the failures in a row
        if not partial.exists():
            partial.touch()
        with (
            httpx.Client(follow_redirects=True, timeout=TIMEOUT, verify=tls.context()) as client,
            open(partial, "r+b") as fh,
        ):
            fh.seek(self.completed)
            fh.truncate()
            while self.completed < self.size:
                if self.abort.is_set():
                    raise cancelled()
                before = self.completed
                try:
                    self._attempt(client, fh)
                    if self.completed != before:  # more bytes, or a restart from 0
                        failures = 0
                        continue
                    why = "the server ended an answer without data"
                except (httpx.TransportError, _Retry) as exc:
                    why = _why(exc)
                # Counted in a row: an attempt that gained bytes before failing starts over.
                failures = 1 if self.completed > before else failures + 1
                waits = waits[: failures - 1]
                if failures > RETRIES:
                    raise PullError(self._gave_up(why, failures, waits), status=502) from None
                fh.flush()
                waits.append(backoff(failures))
                self.notes.append(
                    f"{self.digest[7:19]}: {why}; resuming at {format_bytes(self.completed)} "
                    f"in {waits[-1]:g} s (retry {failures} of {RETRIES})"
                )
                if self.abort.wait(waits[-1]):
                    raise cancelled() from None
            fh.flush()
            os.fsync(fh.fileno())
        got = "sha256:" + self.h.hexdigest()
        if got != self.digest:
            partial.unlink(missing_ok=True)
            raise DigestMismatch(f'digest mismatch, expected "{self.digest}", got "{got}"')
        self.blobs.commit_partial(self.digest)

    def _gave_up(self, why: str, failures: int, waits: list[float]) -> str:
        tries = f"{failures} attempts in a row failed" if failures > 1 else "the attempt failed"
        after = f", retried after {', '.join(f'{w:g}' for w in waits)} s" if waits else ""
        return (
            f"downloading {self.digest}: {why}; {tries}{after}, giving up. "
            f"{format_bytes(self.completed)} of {format_bytes(self.size)} are kept: "
            "pull again to resume from there"
        )

    def _restart(self, fh: BinaryIO) -> None:
        fh.seek(0)
        fh.truncate()
        self.completed, self.h = 0, hashlib.sha256()

    def _attempt(self, client: httpx.Client, fh: BinaryIO) -> None:
        headers = dict(self.headers)
        if self.completed:
            headers["Range"] = f"bytes={self.completed}-"
        with client.stream("GET", self.url, headers=headers) as r:
            if r.status_code == 206 and self.completed:
                want = f"bytes {self.completed}-"
                if not r.headers.get("Content-Range", "").startswith(want):
                    raise _Retry(f"unexpected Content-Range {r.headers.get('Content-Range')!r}")
            elif r.status_code == 200:
                if self.completed:  # the server ignored Range: start over
                    self._restart(fh)
            elif r.status_code == 416:  # our partial does not fit the file: start over
                self._restart(fh)
                return
            elif r.status_code == 429 or r.status_code >= 500:
                raise _Retry(f"the server answered {r.status_code}")
            elif r.status_code == 404:
                raise ModelNotFound(f"blob {self.digest} not found at {self.url}")
            else:
                raise PullError(
                    f"downloading {self.digest}: the server answered {r.status_code}",
                    status=r.status_code,
                )
            # Unchunked: bytes already received must reach the file before a cut.
            for chunk in r.iter_raw():
                if self.abort.is_set():
                    raise cancelled()
                if self.completed + len(chunk) > self.size:
                    fh.flush()
                    self.blobs.partial_path(self.digest).unlink(missing_ok=True)
                    raise DigestMismatch(
                        f"{self.digest}: the server sent more than the "
                        f"{self.size} bytes the Hub listed"
                    )
                fh.write(chunk)
                self.h.update(chunk)
                self.completed += len(chunk)
                for bucket in self.buckets:  # the bandwidth caps: sleep off what they lack
                    if not bucket.take(len(chunk), self.abort):
                        raise cancelled()


_lock = threading.Lock()
_inflight: dict[str, _Download] = {}


def _tell(notes: list[str], told: int, notice: Notice | None) -> int:
    """Pass the notes from ``told`` on to ``notice``; returns how many were told."""
    new = notes[told:]
    if notice is not None:
        for line in new:
            notice(line)
    return told + len(new)


def _fresh(exc: BaseException) -> BaseException:
    """A copy of a shared download's error for one caller (tracebacks are per raise)."""
    if isinstance(exc, LocalLLMError):
        return type(exc)(exc.message, status=exc.status)
    return PullError(f"download failed: {exc}")


def fetch(
    blobs: BlobStore,
    digest: str,
    size: int,
    url: str,
    headers: dict[str, str],
    progress: Progress,
    cancel: threading.Event | None = None,
    *,
    limit: ratelimit.Bucket | None = None,
    notice: Notice | None = None,
) -> bool:
    """Make sure blob ``digest`` (``size`` bytes, at ``url``) is in ``blobs``.

    ``progress(completed)`` is called about every 60 ms while bytes arrive and
    once at the end; ``notice(line)`` once per retry after a failure.  ``limit``:
    the pull's own bandwidth cap (the process-wide one always applies); a download
    already in flight for another caller keeps the caps it started with.
    Returns False on a cache hit (the blob was already there).
    """
    if blobs.exists(digest):
        progress(size)
        return False
    while True:
        with _lock:
            dl = _inflight.get(str(blobs.partial_path(digest)))
            started = dl is None
            if dl is None:
                dl = _Download(blobs, digest, size, url, headers, limit)
                _inflight[dl.key] = dl
                threading.Thread(target=dl.run, name=f"pull-{digest[7:19]}", daemon=True).start()
            if not dl.abort.is_set():
                dl.users += 1
                break
        # Everyone left that download and it is winding down: wait, then start afresh.
        dl.done.wait()
    try:
        # A caller that joins a download in flight is told of its retries from now on;
        # the one that started it, of all (its thread may have failed once already).
        last, told = -1, 0 if started else len(dl.notes)
        while not dl.done.wait(PROGRESS_INTERVAL_S):
            if cancel is not None and cancel.is_set():
                raise cancelled()
            told = _tell(dl.notes, told, notice)
            if dl.completed != last:
                last = dl.completed
                progress(last)
        _tell(dl.notes, told, notice)
        if dl.error is not None:
            raise _fresh(dl.error)
        progress(size)
        return True
    finally:
        with _lock:
            dl.users -= 1
            if dl.users == 0 and not dl.done.is_set():
                dl.abort.set()


def wait_idle(timeout: float = 5.0) -> bool:
    """Wait until no download is in flight (tests; a daemon shutting down)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with _lock:
            if not _inflight:
                return True
        time.sleep(0.01)
    return False
