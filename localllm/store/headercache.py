"""GGUF headers read from the Hub for the search and the fit check, and the cache that keeps them.

``read_headers`` reads each file's header over range requests (``store/remote.py``'s
``RangeFile`` and the bounded header reader) and keeps it in a cache that is:

* keyed by what was actually read, never by the sha256 a tree listing of the
  mutable ``main`` revision claimed: the strong ``ETag`` every range answer for
  the file carried (the Hub's CDN names the content it serves with it), the
  file's size, and the sha256 of the first range's bytes.  A lookup therefore
  costs one range request (``remote.MIN_FETCH`` bytes, which the header read
  reuses on a miss); answers without a strong ETag, or whose ETag changed in
  the middle of a read (the file was replaced), are not cached;
* capped in bytes (``CACHE_BYTES``, each header costed by ``footprint``), the
  least recently used header evicted first.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import httpx

from localllm.gguf.info import ModelInfo, model_info_from_headers
from localllm.gguf.reader import Header, read_header_from
from localllm.store import hub, remote
from localllm.store.hub import HubFile
from localllm.store.remote import RemoteHeaders, RemoteReadError

CACHE_BYTES = 32 << 20
MAX_ENTRY = CACHE_BYTES // 4  # a header costing more is read, not kept

Key = tuple[str, int, str, str]  # endpoint, size, ETag, sha256 of the first range


def footprint(h: Header) -> int:
    """About how many bytes ``h`` holds: its kept strings and arrays, its tensor table."""
    total = 256
    for k, v in h.kv.items():
        total += 64 + len(k) + _value_bytes(v)
    for t in h.tensors:
        total += 160 + len(t[0])
    return total + 96 * len(h.layout)


def _value_bytes(v: Any) -> int:
    if isinstance(v, str):
        return len(v)
    if isinstance(v, (list, tuple)):
        return 8 + sum(_value_bytes(x) + 8 for x in v)
    return 16


class HeaderCache:
    """An LRU of headers bounded by the sum of their ``footprint``."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[Key, tuple[Header, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key) -> Header | None:
        with self._lock:
            got = self._items.get(key)
            if got is None:
                return None
            self._items.move_to_end(key)
            return got[0]

    def put(self, key: Key, header: Header) -> None:
        cost = footprint(header)
        if cost > min(MAX_ENTRY, self.max_bytes):
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._items[key] = (header, cost)
            self.bytes += cost
            while self.bytes > self.max_bytes:
                _, (_, freed) = self._items.popitem(last=False)
                self.bytes -= freed

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0


cache = HeaderCache()


@dataclass
class _Witness:
    """Stands in for the client a ``RangeFile`` reads with, noting each range answer's ETag."""

    client: httpx.Client
    etags: list[str] = field(default_factory=list)

    @contextmanager
    def stream(self, method: str, url: str, **kw: Any) -> Iterator[httpx.Response]:
        with self.client.stream(method, url, **kw) as r:
            if r.status_code == 206:
                self.etags.append(r.headers.get("etag", ""))
            yield r

    def etag(self) -> str | None:
        """The one strong ETag every range answer carried, if they did."""
        tags = set(self.etags)
        if len(tags) != 1:
            return None
        (tag,) = tags
        return tag if tag.startswith('"') and len(tag) <= 200 else None


def read_headers(
    repo_id: str,
    files: Sequence[HubFile],
    *,
    client: httpx.Client | None = None,
    timeout: httpx.Timeout = remote.TIMEOUT,
) -> RemoteHeaders:
    """The GGUF headers of ``files`` (one file, or a split model's shards in order)."""

    def read(http: httpx.Client, f: HubFile) -> tuple[Header, int, int]:
        w = _Witness(http)
        rf = remote.RangeFile(
            cast(httpx.Client, w),  # it only calls ``stream``
            remote.file_url(repo_id, f.path),
            f.size,
            f"hf.co/{repo_id}/{f.path}",
            remote.hub_headers(),
        )
        return _read(rf, w, f), rf.fetched, rf.requests

    return remote.read_each(repo_id, files, read, client=client, timeout=timeout)


def _read(rf: remote.RangeFile, w: _Witness, f: HubFile) -> Header:
    first = hashlib.sha256(rf.read(min(remote.MIN_FETCH, f.size))).hexdigest()
    tag = w.etag()
    key: Key | None = (hub.endpoint(), f.size, tag, first) if tag is not None else None
    if key is not None and (hit := cache.get(key)) is not None:
        return hit
    rf.seek(0)
    header = read_header_from(rf, f.size, f.path)  # type: ignore[arg-type]
    if w.etag() != tag:
        # Ranges of two different files: what was read describes neither.
        raise RemoteReadError(f"{rf.name}: the file changed on the Hub while it was read")
    if key is not None:
        cache.put(key, header)
    return header


def read_model_info(
    repo_id: str, files: Sequence[HubFile], **kw: Any
) -> tuple[ModelInfo, RemoteHeaders]:
    """``ModelInfo`` of the remote model ``files``, and what reading it cost."""
    got = read_headers(repo_id, files, **kw)
    return model_info_from_headers(got.headers), got
