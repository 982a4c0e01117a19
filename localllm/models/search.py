"""``GET /api/search``'s use case: the Hub's GGUF repos for a query, with a fit for every quant.

The repos, their quants and one header per repo come from ``store/search.py``
(bounded in requests and time); this module adds what the daemon's machine
makes of them: each quant planned on the devices a load would find
(``remote.Machine``), its weights scaled from the one header read for the repo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from localllm.api.wire import SearchModel, SearchResponse
from localllm.errors import LocalLLMError
from localllm.models.details import capabilities
from localllm.models.remote import Machine
from localllm.scheduler.fit import Fit, assess, scaled, unknown
from localllm.store import search as hub_search

log = logging.getLogger(__name__)


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def catalog_entries() -> list[tuple[str, str]]:
    """The library catalogue as (name, repo) pairs: ``llama3.2:1b`` and, for the tag
    ``latest`` names, ``llama3.2``.  A catalogue that cannot be read adds nothing."""
    from localllm.store import catalog

    try:
        cat = catalog.load()
    except LocalLLMError as exc:
        log.warning("search without the catalogue: %s", exc)
        return []
    out = []
    for fam in cat.families.values():
        for tag, entry in fam.tags.items():
            repo = f"{entry.source.namespace}/{entry.source.model}"
            out.append((f"{fam.name}:{tag}", repo))
            if tag == fam.latest:
                out.append((fam.name, repo))
    return out


def _quant_fit(r: hub_search.Repo, q: hub_search.Quant, machine: Machine) -> Fit:
    if r.info is None:
        return unknown(r.error or "the header was not read in time")
    info = r.info if q is r.read_from else scaled(r.info, q.size, r.data_bytes)
    return assess(info, machine.devices, machine.opts, find_max_context=False)


def _model(r: hub_search.Repo, here: Machine) -> SearchModel:
    info = r.info
    # The Hub's reading of the template, else our own from the header.
    template = _str(r.gguf.get("chat_template")) or _str(info and info.chat_template)
    embedding = r.pipeline_tag in ("feature-extraction", "sentence-similarity") or (
        info is not None and info.pooling_type is not None
    )
    ctx = r.gguf.get("context_length")
    return {
        "name": f"hf.co/{r.repo}",
        "repo": r.repo,
        "catalog": r.catalog,
        "base_models": r.base_models,
        "downloads": r.downloads,
        "likes": r.likes,
        "updated": r.updated,
        "capabilities": capabilities(
            template,
            embedding=embedding,
            vision=bool(r.projectors),
            rerank=r.pipeline_tag == "text-ranking" or (info is not None and info.rank_head),
        ),
        "context_length": ctx
        if isinstance(ctx, int) and ctx > 0
        else (info.context_length if info is not None and info.context_length else None),
        "quants": [
            {
                "tag": q.tag,
                "files": [f.path for f in q.files],
                "size": q.size,
                "fit": _quant_fit(r, q, here).to_json(),
            }
            for q in r.quants or []
        ],
        "error": r.error or None,
    }


def search(
    query: str,
    limit: int,
    machine: Callable[[], Machine],
    catalog: Callable[[], list[tuple[str, str]]] = catalog_entries,
    deadline_s: float = hub_search.DEADLINE_S,
) -> SearchResponse:
    """``GET /api/search``'s answer (see docs/api.md)."""
    repos = hub_search.search(query, limit, catalog=catalog, deadline_s=deadline_s)
    here = machine()
    return {"models": [_model(r, here) for r in repos]}
