"""A GGUF's header on the Hub, read without downloading the file: HTTP range requests.

``RangeFile`` is a read-only file over one Hub file (the ``resolve`` URL, its
redirect to the CDN followed as the downloader does): ``seek`` and ``read``
turn into ``Range: bytes=a-b`` requests, and what arrived is kept in memory, so
the header reader (``gguf.reader.read_header_from``, the same bounded reader
and limits as for local files) can walk the key/values, skip the long arrays
and come back for the BOS/EOS texts.  Nothing is written to the store.

Nothing the remote says is trusted: each answer must be a ``206`` whose
``Content-Range`` is the range asked for and whose total is the size the tree
listed; a body longer than asked is cut off and refused; and a file costs at
most ``MAX_HEADER_BYTES`` of transfer, so a hostile header (a vocabulary of
16 million long strings) is refused after a bounded read, not downloaded.
A real header (key/values, vocabulary and merges, tensor table) is 1 to 8 MB.

``read_headers`` reads every shard of a split GGUF (each has its own tensor
table).  Headers are kept in a small in-memory cache keyed by the files' LFS
sha256, which names the content, so a search followed by a dry run reads once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from localllm import tls
from localllm.errors import PullError
from localllm.gguf.info import ModelInfo, model_info_from_headers
from localllm.gguf.reader import Header, read_header_from
from localllm.store import hub
from localllm.store.hub import HubFile

MAX_HEADER_BYTES = 32 << 20  # transfer allowed per file
MIN_FETCH = 256 << 10  # the smallest range asked for: fewer round trips for small reads
RETRIES = 2
TIMEOUT = httpx.Timeout(20.0, connect=10.0)
CACHE_ENTRIES = 64


class RemoteReadError(PullError):
    """The Hub could not be read (network, status, a malformed answer): 502."""

    status = 502


class HeaderTooLarge(RemoteReadError):
    """Reading the header would take more than ``MAX_HEADER_BYTES`` of transfer."""


class RangeFile:
    """``seek``/``read``/``tell`` over a remote file of ``size`` bytes (see the module doc)."""

    def __init__(
        self,
        client: httpx.Client,
        url: str,
        size: int,
        name: str,
        headers: dict[str, str],
        budget: int = MAX_HEADER_BYTES,
    ) -> None:
        self.client, self.url, self.size, self.name = client, url, size, name
        self.headers = {**headers, "Accept-Encoding": "identity"}
        self.budget = budget
        self.fetched = 0  # bytes transferred
        self.requests = 0
        self.pos = 0
        self._final: str | None = None  # where the first redirect chain ended (the CDN)
        self._segments: list[tuple[int, bytes]] = []  # sorted by start, non-overlapping

    # -- the file interface the header reader uses -----------------------------
    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(base + offset, 0)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n < 0 else min(self.pos + n, self.size)
        if end <= self.pos:
            return b""
        data = self._bytes(self.pos, end)
        self.pos = end
        return data

    # -- ranges ------------------------------------------------------------------
    def _bytes(self, a: int, b: int) -> bytes:
        while True:
            parts, gap = self._cached(a, b)
            if gap is None:
                return b"".join(parts)
            # Fetch from the first gap on, at least MIN_FETCH: the reader goes forward.
            upto = min(max(b, gap + MIN_FETCH), self.size)
            nxt = next((s for s, _ in self._segments if s > gap), None)
            if nxt is not None:  # up to the next piece already here
                upto = min(upto, nxt)
            self._add(gap, self._fetch(gap, upto))

    def _cached(self, a: int, b: int) -> tuple[list[bytes], int | None]:
        """The cached pieces covering ``[a, b)``, or the first offset not cached."""
        parts, at = [], a
        for start, data in self._segments:
            end = start + len(data)
            if end <= at:
                continue
            if start > at:
                break
            parts.append(data[at - start : min(b, end) - start])
            at = min(b, end)
            if at >= b:
                return parts, None
        return parts, at

    def _add(self, start: int, data: bytes) -> None:
        self._segments.append((start, data))
        self._segments.sort(key=lambda s: s[0])

    def _fetch(self, a: int, b: int) -> bytes:
        """Bytes ``[a, b)`` with one range request (retried on network errors and 5xx)."""
        want = b - a
        if self.fetched + want > self.budget:
            raise HeaderTooLarge(
                f"{self.name}: the header needs more than {self.budget >> 20} MiB to read; "
                "not checked",
                status=502,
            )
        for attempt in range(RETRIES + 1):
            try:
                return self._attempt(a, b)
            except (httpx.TransportError, _Retry) as exc:
                if attempt == RETRIES:
                    raise RemoteReadError(
                        f"{self.name}: reading the header failed: {exc}", status=502
                    ) from None
                time.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    def _attempt(self, a: int, b: int) -> bytes:
        url, headers = self.url, dict(self.headers)
        if self._final is not None:
            url = self._final
            if _origin(url) != _origin(self.url):  # never send the token to the CDN
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Range"] = f"bytes={a}-{b - 1}"
        self.requests += 1
        with self.client.stream("GET", url, headers=headers) as r:
            if r.status_code in (403, 404, 410) and self._final is not None:
                self._final = None  # a signed CDN URL may expire: resolve again
                raise _Retry(f"the CDN answered {r.status_code}")
            if r.status_code == 429 or r.status_code >= 500:
                raise _Retry(f"the Hub answered {r.status_code}")
            if r.status_code == 404:
                raise RemoteReadError(f"{self.name}: not found on the Hub", status=404)
            if r.status_code in (401, 403):
                raise RemoteReadError(
                    f"{self.name}: the Hub refused access ({r.status_code}); set HF_TOKEN",
                    status=403,
                )
            if r.status_code != 206:
                raise RemoteReadError(
                    f"{self.name}: the Hub answered {r.status_code} to a "
                    "range request (range reads are needed to check a file "
                    "before downloading it)",
                    status=502,
                )
            self._check_range(r.headers.get("Content-Range", ""), a, b)
            if self._final is None and str(r.url) != url:
                self._final = str(r.url)
            out = bytearray()
            for chunk in r.iter_raw():
                out += chunk
                self.fetched += len(chunk)
                if len(out) > b - a:
                    raise RemoteReadError(
                        f"{self.name}: the Hub sent more than the {b - a} bytes asked for",
                        status=502,
                    )
            if len(out) != b - a:
                raise _Retry(f"short answer: {len(out)} of {b - a} bytes")
            return bytes(out)

    def _check_range(self, value: str, a: int, b: int) -> None:
        expect = f"bytes {a}-{b - 1}/{self.size}"
        if value.strip() != expect:
            raise RemoteReadError(
                f"{self.name}: the Hub answered the range with Content-Range {value[:80]!r}, "
                f"expected {expect!r} (its tree listed {self.size} bytes)",
                status=502,
            )


class _Retry(Exception):
    pass


def _origin(url: str) -> tuple[str, str, int | None]:
    u = httpx.URL(url)
    return u.scheme, u.host, u.port


# -- reading headers --------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteHeaders:
    headers: list[Header]
    bytes_read: int  # transferred for these files (0 when every one came from the cache)
    requests: int


_cache: OrderedDict[tuple[str, ...], Header] = OrderedDict()
_cache_lock = threading.Lock()


def _key(repo_id: str, f: HubFile) -> tuple[str, ...]:
    # The LFS sha256 names the content; without one, the path and size at least.
    return (hub.endpoint(), f.sha256 or f"{repo_id}/{f.path}:{f.size}")


def file_url(repo_id: str, path: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, path, revision=hub.REVISION, endpoint=hub.endpoint())


def hub_headers() -> dict[str, str]:
    """What every request to the Hub carries: user agent and, with HF_TOKEN, the token."""
    from huggingface_hub.utils import build_hf_headers

    return dict(build_hf_headers(token=hub.token()))


def read_each(
    repo_id: str,
    files: Sequence[HubFile],
    read: Callable[[httpx.Client, HubFile], tuple[Header, int, int]],
    *,
    client: httpx.Client | None = None,
    timeout: httpx.Timeout = TIMEOUT,
) -> RemoteHeaders:
    """``read(client, file)`` -> (header, bytes fetched, requests) for each of ``files`` in
    order, on ``client`` or one of our own (closed after), with what they cost summed.  A
    transport error outside a fetch is a ``RemoteReadError`` naming the repo."""
    own = client is None
    http = (
        client
        if client is not None
        else httpx.Client(follow_redirects=True, timeout=timeout, verify=tls.context())
    )
    out: list[Header] = []
    fetched = requests = 0
    try:
        for f in files:
            header, f_fetched, f_requests = read(http, f)
            out.append(header)
            fetched, requests = fetched + f_fetched, requests + f_requests
    except httpx.HTTPError as exc:  # anything the transport raises outside a fetch
        raise RemoteReadError(f"cannot read hf.co/{repo_id}: {exc}", status=502) from None
    finally:
        if own:
            http.close()
    return RemoteHeaders(out, fetched, requests)


def read_headers(
    repo_id: str,
    files: Sequence[HubFile],
    *,
    client: httpx.Client | None = None,
    timeout: httpx.Timeout = TIMEOUT,
) -> RemoteHeaders:
    """The GGUF headers of ``files`` (one file, or a split model's shards in order)."""

    def read(http: httpx.Client, f: HubFile) -> tuple[Header, int, int]:
        key = _key(repo_id, f)
        with _cache_lock:
            cached = _cache.get(key)
            if cached is not None:
                _cache.move_to_end(key)
        if cached is not None:
            return cached, 0, 0
        rf = RangeFile(
            http, file_url(repo_id, f.path), f.size, f"hf.co/{repo_id}/{f.path}", hub_headers()
        )
        header = read_header_from(rf, f.size, f.path)  # type: ignore[arg-type]
        with _cache_lock:
            _cache[key] = header
            while len(_cache) > CACHE_ENTRIES:
                _cache.popitem(last=False)
        return header, rf.fetched, rf.requests

    return read_each(repo_id, files, read, client=client, timeout=timeout)


def read_model_info(
    repo_id: str, files: Sequence[HubFile], **kw: Any
) -> tuple[ModelInfo, RemoteHeaders]:
    """``ModelInfo`` of the remote model ``files``, and what reading it cost."""
    got = read_headers(repo_id, files, **kw)
    return model_info_from_headers(got.headers), got


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
