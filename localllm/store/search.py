"""Search the Hub for GGUF models: repos, their quant files, and one header each.

``search(query, limit)`` asks the Hub's model search the way ``huggingface_hub``
does (``GET /api/models?search=Q&filter=gguf&sort=downloads&direction=-1&limit=N``
with ``expand[]=downloads, likes, lastModified, pipeline_tag, tags, gguf``: the
``gguf`` details are the Hub's own reading of the repo's GGUF: parameter
count, architecture, training context, chat template), adds the repos the
library catalogue names for the query, then, per repo and concurrently, lists
the tree with sizes (``/api/models/{repo}/tree/main?recursive=true``) and reads
the header of its smallest single-file quant over range requests
(``store/remote.py``); the other quants are planned by scaling its weights by
file size (``scheduler/fit.scaled``).

Time is bounded: ``WORKERS`` repos at once, ``TIMEOUT`` per request and
``DEADLINE_S`` for the whole search; a repo whose tree or header is not there
by then comes back with what is known (no quants, or no header: the fit is
"unknown"), and a repo that failed says why in ``error``.  Everything the Hub
sends is checked before use: repo ids must be valid model names, sizes sane
integers, answers under ``MAX_ANSWER`` bytes.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import httpx

from localllm.errors import InvalidRequest, LocalLLMError, PullError
from localllm.gguf.info import ModelInfo
from localllm.store import hub, projector, remote
from localllm.store.hub import HubFile

log = logging.getLogger(__name__)

WORKERS = 8
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
DEADLINE_S = 25.0
MAX_ANSWER = 16 << 20
MAX_LIMIT = 50
MAX_QUERY = 200
MAX_TREE_PAGES = 20
MAX_SIZE = 1 << 50
EXPAND = ("downloads", "likes", "lastModified", "pipeline_tag", "tags", "gguf")
_REPO_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}$")
_NEXT_RE = re.compile(r'<([^>]+)>;\s*rel="next"')

# The library catalogue's view, as (name, repo) pairs: wired to store/catalog.py.
CatalogFn = Callable[[], list[tuple[str, str]]]


@dataclass
class Quant:
    tag: str  # what follows ``hf.co/{repo}:`` to pull these files
    files: list[HubFile]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class Repo:
    """One search result; filled in as its tree and header arrive."""

    repo: str
    downloads: int = 0
    likes: int = 0
    updated: str = ""
    pipeline_tag: str = ""
    tags: list[str] = field(default_factory=list)
    gguf: dict[str, Any] = field(default_factory=dict)  # the Hub's ``gguf`` details
    catalog: list[str] = field(default_factory=list)
    quants: list[Quant] | None = None  # None: the tree was not read
    projectors: list[HubFile] = field(default_factory=list)
    info: ModelInfo | None = None  # the header of ``read_from``
    read_from: Quant | None = None
    data_bytes: int = 0  # tensor bytes of ``read_from`` (what ``scaled`` divides by)
    header_bytes: int = 0  # transferred for the header
    error: str = ""


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_SIZE else 0


def _str(v: Any, cap: int = 1 << 20) -> str:
    return v[:cap] if isinstance(v, str) else ""


def _repo_from(item: Any) -> Repo | None:
    if not isinstance(item, dict):
        return None
    rid = item.get("id") or item.get("modelId")
    if not isinstance(rid, str) or not _REPO_RE.fullmatch(rid):
        return None
    g = item.get("gguf")
    gguf = {k: v for k, v in g.items() if isinstance(k, str)} if isinstance(g, dict) else {}
    tags = item.get("tags")
    return Repo(
        rid,
        _int(item.get("downloads")),
        _int(item.get("likes")),
        _str(item.get("lastModified"), 64),
        _str(item.get("pipeline_tag"), 64),
        [t for t in tags if isinstance(t, str)][:100] if isinstance(tags, list) else [],
        gguf,
    )


def _get_json(client: httpx.Client, url: str, params: Any = None) -> tuple[Any, httpx.Response]:
    with client.stream("GET", url, params=params, headers=remote.hub_headers()) as r:
        if r.status_code != 200:
            raise PullError(f"the Hub answered {r.status_code} to {r.url.path}", status=502)
        body = bytearray()
        for chunk in r.iter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER:
                raise PullError(
                    f"the Hub's answer to {r.url.path} is over {MAX_ANSWER >> 20} MiB", status=502
                )
    try:
        return json.loads(body), r
    except ValueError:
        raise PullError(f"the Hub sent malformed JSON for {r.url.path}", status=502) from None


def _expand() -> list[tuple[str, str]]:
    return [("expand[]", e) for e in EXPAND]


def hub_search(client: httpx.Client, query: str, limit: int) -> list[Repo]:
    params = [
        ("search", query),
        ("filter", "gguf"),
        ("sort", "downloads"),
        ("direction", "-1"),
        ("limit", str(limit)),
        *_expand(),
    ]
    data, _ = _get_json(client, f"{hub.endpoint()}/api/models", params)
    if not isinstance(data, list):
        raise PullError("the Hub's search answer is not a list", status=502)
    return [r for r in map(_repo_from, data[:limit]) if r is not None]


def hub_repo(client: httpx.Client, repo: str) -> Repo | None:
    """One repo's search fields (a catalogue entry the search text did not find)."""
    try:
        data, _ = _get_json(client, f"{hub.endpoint()}/api/models/{repo}", _expand())
    except PullError:
        return None
    return _repo_from(data)


def list_tree(client: httpx.Client, repo: str) -> list[HubFile]:
    """Every file of ``repo`` with its size and LFS sha256 (pages followed via ``Link``)."""
    url: str | None = f"{hub.endpoint()}/api/models/{repo}/tree/{hub.REVISION}"
    params: Any = {"recursive": "true"}
    out: list[HubFile] = []
    for _ in range(MAX_TREE_PAGES):
        if url is None:
            break
        data, r = _get_json(client, url, params)
        if not isinstance(data, list):
            raise PullError(f"the Hub's tree of {repo} is not a list", status=502)
        for e in data:
            if not isinstance(e, dict) or e.get("type") != "file":
                continue
            path, lfs = e.get("path"), e.get("lfs")
            if not isinstance(path, str) or not path or len(path) > 1024 or ".." in path:
                continue
            sha = lfs.get("oid") if isinstance(lfs, dict) else None
            sha = sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None
            out.append(HubFile(path, _int(e.get("size")), sha))
        m = _NEXT_RE.search(r.headers.get("link", ""))
        url, params = (m.group(1), None) if m else (None, None)
        if url is not None and httpx.URL(url).host != httpx.URL(hub.endpoint()).host:
            break  # a next page elsewhere is not followed
    return out


def quants_of(files: list[HubFile]) -> list[Quant]:
    """The repo's model choices as ``pull`` sees them; a quant label two groups share
    (one per folder) is replaced by the file name, which ``pull`` also accepts."""
    groups = list(hub.model_groups(files).values())
    labels = [hub.quant_of(g[0].filename) for g in groups]
    out = []
    for label, group in zip(labels, groups, strict=True):
        tag = label if labels.count(label) == 1 else group[0].path
        out.append(Quant(tag, group))
    return sorted(out, key=lambda q: q.size)


def _fill(client: httpx.Client, r: Repo, lock: threading.Lock) -> None:
    """List ``r``'s tree, then read the header of its smallest single-file quant."""
    try:
        files = list_tree(client, r.repo)
        quants = quants_of(files)
        with lock:
            r.quants, r.projectors = quants, projector.projector_files(files)
        pick = next((q for q in quants if len(q.files) == 1), quants[0] if quants else None)
        if pick is None:
            return
        info, got = remote.read_model_info(r.repo, pick.files, client=client)
        with lock:
            r.info, r.read_from, r.header_bytes = info, pick, got.bytes_read
            r.data_bytes = sum(t[2] for h in got.headers for t in h.tensors)
    except (LocalLLMError, httpx.HTTPError) as exc:
        with lock:
            r.error = str(exc)
    except Exception as exc:  # a bug must not vanish with the worker thread
        log.exception("search: reading %s failed", r.repo)
        with lock:
            r.error = f"internal error: {exc.__class__.__name__}"


def search(
    query: str, limit: int = 10, *, catalog: CatalogFn | None = None, deadline_s: float = DEADLINE_S
) -> list[Repo]:
    """The repos for ``query``, catalogue matches first, each filled as far as time allowed."""
    query = query.strip()
    if not query or len(query) > MAX_QUERY:
        raise InvalidRequest(f"a search needs a query of 1 to {MAX_QUERY} characters")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")
    entries = catalog() if catalog is not None else []
    end = time.monotonic() + deadline_s
    client = httpx.Client(follow_redirects=True, timeout=TIMEOUT)
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="hub-search")
    try:
        try:
            found = hub_search(client, query, limit)
        except httpx.HTTPError as exc:
            raise PullError(
                f"cannot reach the Hub at {hub.endpoint()}: {exc}", status=502
            ) from None
        repos = _with_catalog(client, found, entries, query, limit)
        lock = threading.Lock()
        futures = [pool.submit(_fill, client, r, lock) for r in repos]
        wait(futures, timeout=max(end - time.monotonic(), 0))
        with lock:  # a snapshot: late answers do not change what is returned
            return [_copy(r) for r in repos]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        # The client is closed once the last worker is done with it, off this thread.
        threading.Thread(target=_close_after, args=(pool, client), daemon=True).start()


def _close_after(pool: ThreadPoolExecutor, client: httpx.Client) -> None:
    pool.shutdown(wait=True)
    client.close()


def _copy(r: Repo) -> Repo:
    from dataclasses import replace

    return replace(
        r, quants=list(r.quants) if r.quants is not None else None, catalog=list(r.catalog)
    )


def _with_catalog(
    client: httpx.Client, found: list[Repo], entries: list[tuple[str, str]], query: str, limit: int
) -> list[Repo]:
    """Catalogue repos whose names match ``query`` first, then the Hub's own results;
    every repo is tagged with the catalogue names that point at it."""
    names: dict[str, list[str]] = {}
    for name, repo in entries:
        names.setdefault(repo.lower(), []).append(name)
    q = query.lower()
    wanted = [repo for name, repo in entries if q in name.lower()]
    by_id = {r.repo.lower(): r for r in found}
    out: list[Repo] = []
    for repo in dict.fromkeys(w.lower() for w in wanted):
        r = by_id.get(repo) or hub_repo(client, next(w for w in wanted if w.lower() == repo))
        if r is not None and len(out) < limit:
            out.append(r)
    for r in found:
        if len(out) < limit and all(r.repo.lower() != o.repo.lower() for o in out):
            out.append(r)
    for r in out:
        r.catalog = sorted(names.get(r.repo.lower(), []))
    return out
