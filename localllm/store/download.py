"""Download one blob into the store: stream, hash while writing, resume, retry, verify.

Bytes go to ``blobs/sha256-<hex>-partial`` and are hashed as they arrive, so a
fresh download is never read twice.  After an interruption the next attempt
re-hashes the partial prefix once and asks for the rest with ``Range``.  The
blob appears under its final name only when the sha256 matches; a mismatch
deletes the partial and raises ``DigestMismatch``.

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

from localllm.errors import DigestMismatch, LocalLLMError, ModelNotFound, PullError
from localllm.store.blobs import CHUNK, BlobStore

RETRIES = 6
BACKOFF_S = 0.5  # doubled per consecutive failure, capped at BACKOFF_MAX_S
BACKOFF_MAX_S = 10.0
PROGRESS_INTERVAL_S = 0.06
TIMEOUT = httpx.Timeout(30.0, connect=10.0)

Progress = Callable[[int], None]


class _Retry(Exception):
    """A failure worth another attempt (network error, 429, 5xx)."""


def cancelled() -> PullError:
    return PullError("pull cancelled", status=499)


class _Download:
    def __init__(
        self, blobs: BlobStore, digest: str, size: int, url: str, headers: dict[str, str]
    ) -> None:
        self.blobs, self.digest, self.size, self.url = blobs, digest, size, url
        self.headers = {**headers, "Accept-Encoding": "identity"}
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
        if not partial.exists():
            partial.touch()
        with (
            httpx.Client(follow_redirects=True, timeout=TIMEOUT) as client,
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
                except (httpx.TransportError, _Retry) as exc:
                    failures += 1
                    if failures > RETRIES:
                        raise PullError(
                            f"downloading {self.digest}: giving up after {RETRIES} retries: {exc}",
                            status=502,
                        ) from None
                    fh.flush()
                    delay = min(BACKOFF_S * 2 ** (failures - 1), BACKOFF_MAX_S)
                    if self.abort.wait(delay):
                        raise cancelled() from None
                    continue
                if self.completed > before:
                    failures = 0
                else:  # the server ended a response without sending anything
                    failures += 1
                    if failures > RETRIES:
                        raise PullError(f"downloading {self.digest}: no data", status=502)
            fh.flush()
            os.fsync(fh.fileno())
        got = "sha256:" + self.h.hexdigest()
        if got != self.digest:
            partial.unlink(missing_ok=True)
            raise DigestMismatch(f'digest mismatch, expected "{self.digest}", got "{got}"')
        self.blobs.commit_partial(self.digest)

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


_lock = threading.Lock()
_inflight: dict[str, _Download] = {}


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
) -> bool:
    """Make sure blob ``digest`` (``size`` bytes, at ``url``) is in ``blobs``.

    ``progress(completed)`` is called about every 60 ms while bytes arrive and
    once at the end.  Returns False on a cache hit (the blob was already there).
    """
    if blobs.exists(digest):
        progress(size)
        return False
    while True:
        with _lock:
            dl = _inflight.get(str(blobs.partial_path(digest)))
            if dl is None:
                dl = _Download(blobs, digest, size, url, headers)
                _inflight[dl.key] = dl
                threading.Thread(target=dl.run, name=f"pull-{digest[7:19]}", daemon=True).start()
            if not dl.abort.is_set():
                dl.users += 1
                break
        # Everyone left that download and it is winding down: wait, then start afresh.
        dl.done.wait()
    try:
        last = -1
        while not dl.done.wait(PROGRESS_INTERVAL_S):
            if cancel is not None and cancel.is_set():
                raise cancelled()
            if dl.completed != last:
                last = dl.completed
                progress(last)
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
