"""Search the Hub for GGUF models: repos, their quant files, and one header each.

``search(query, limit)`` asks the Hub's model search the way ``huggingface_hub``
does (``GET /api/models?search=Q&filter=gguf&sort=downloads&direction=-1&limit=N``
with ``expand[]=downloads, likes, lastModified, pipeline_tag, tags, gguf``: the
``gguf`` details are the Hub's own reading of the repo's GGUF: parameter
count, architecture, training context, chat template), adds the repos the
library catalogue names for the query, then, per repo and concurrently, lists
the tree with sizes (``/api/models/{repo}/tree/main?recursive=true``) and reads
the header of its smallest single-file quant over range requests
(``store/headercache.py``); the other quants are planned by scaling its weights
by file size (``scheduler/fit.scaled``).

What one search may cost is bounded by ``limit`` (``store/hubhttp.Bounds`` on its
one client counts every request, redirects included): the search itself, then
for each of at most ``limit`` repos one model-info lookup (catalogue repos the
search did not return; at most ``limit`` lookups, found or not), ``TREE_PAGES``
pages of its tree and one header read of ``HEADER_REQUESTS`` requests at most
(the resolve redirect and its ranges: a real header of 1-8 MB takes 3 to 10).
That is ``1 + REQUESTS_PER_RESULT * limit`` requests, whatever the catalogue or
the Hub answer.  Time is bounded too: ``WORKERS`` repos at once, ``TIMEOUT``
per request, shortened to what is left of ``DEADLINE_S`` for the whole search.
At the deadline the search is cancelled: no new request starts, answers still
arriving are cut (their sockets shut down), and ``search`` returns only once
its workers have stopped; nothing of it runs after it returns.  A repo whose
tree or header was not there in time comes back with what is known (no quants,
or no header: the fit is "unknown"), and a repo that failed says why in
``error``.  Everything the Hub sends is checked before use (``hubhttp``): repo
ids must be valid model names, sizes sane integers, answers bounded.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from localllm.errors import InvalidRequest, LocalLLMError, PullError, ServerBusy
from localllm.gguf.info import ModelInfo
from localllm.store import headercache, hub, hubhttp, projector
from localllm.store.hub import MAX_SIZE, HubFile

log = logging.getLogger(__name__)

WORKERS = 4
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
DEADLINE_S = 25.0
MAX_LIMIT = 50
MAX_QUERY = 200
TREE_PAGES = 2  # 2000 files: more than any GGUF repo of the search's kind
HEADER_REQUESTS = 16
REQUESTS_PER_RESULT = 1 + TREE_PAGES + HEADER_REQUESTS
EXPAND = ("downloads", "likes", "lastModified", "pipeline_tag", "tags", "gguf")
_REPO_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}$")

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

    @property
    def base_models(self) -> list[str]:
        """The repos its ``base_model:`` tags name: ``base_model:quantized:google/x`` and
        ``base_model:google/x`` are both ``google/x`` (valid repo ids only, at most 10)."""
        found = (t.rsplit(":", 1)[-1] for t in self.tags if t.startswith("base_model:"))
        return list(dict.fromkeys(r for r in found if _REPO_RE.fullmatch(r)))[:10]


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


def _get_json(client: httpx.Client, url: str, params: Any = None) -> tuple[Any, str | None]:
    return hubhttp.get_json(client, url, params, endpoint=hub.endpoint(), token=hub.token())


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
    except (PullError, httpx.HTTPError) as exc:
        log.info("search: no details for catalogue repo %s: %s", repo, exc)
        return None
    return _repo_from(data)


def list_tree(client: httpx.Client, repo: str) -> list[HubFile]:
    """Every file of ``repo`` with its size and LFS sha256, at most ``TREE_PAGES`` pages."""
    return hub.list_repo(repo, client=client, pages=TREE_PAGES)


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
        info, got = headercache.read_model_info(r.repo, pick.files, client=client)
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
    if deadline_s <= 0:  # its time went waiting for a turn (server/routes_search.py)
        raise ServerBusy("too many searches at once; try again")
    entries = catalog() if catalog is not None else []
    bounds = hubhttp.Bounds(1 + REQUESTS_PER_RESULT * limit, time.monotonic() + deadline_s)
    client = hubhttp.bounded_client(bounds, TIMEOUT)
    pool = ThreadPoolExecutor(min(WORKERS, limit), thread_name_prefix="hub-search")
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
        wait(futures, timeout=max(bounds.remaining(), 0))
        with lock:  # a snapshot: what the cancelled workers record next is not returned
            return [_copy(r) for r in repos]
    finally:
        # Cancelled, then waited for: no request or worker of this search outlives it.
        bounds.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        client.close()


def _copy(r: Repo) -> Repo:
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
    lookups = 0
    for repo in dict.fromkeys(w.lower() for w in wanted):
        if len(out) >= limit:
            break
        r = by_id.get(repo)
        if r is None:
            # At most ``limit`` lookups, answered or not: a query matching every
            # catalogue name ("e") must not cost a request per name.
            if lookups >= limit:
                break
            lookups += 1
            try:
                r = hub_repo(client, next(w for w in wanted if w.lower() == repo))
            except hubhttp.Stopped:
                break  # out of time: the Hub's own results still count
        if r is not None:
            out.append(r)
    for r in found:
        if len(out) < limit and all(r.repo.lower() != o.repo.lower() for o in out):
            out.append(r)
    for r in out:
        r.catalog = sorted(names.get(r.repo.lower(), []))
    return out
