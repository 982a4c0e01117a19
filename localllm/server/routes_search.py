"""``GET /api/search``: Hugging Face GGUF models for a query, each quant's fit on this machine.

Not in Ollama's API (its library is searched on its website only).  The work,
Hub requests and a header read per repo, bounded in requests and time
(store/search.py), runs in a worker thread of the search's own limiter,
``SEARCH_THREADS`` at once: searches wait for the Hub, and a flood of them
must not take the default worker pool that ``/api/tags``, ``/api/show``,
``/v1/models``, ``/metrics`` and blob uploads run in.  A search's deadline
counts from its arrival, so time spent waiting for a turn is taken from it
(one that waited it all out is refused: 503).  ``machine_of`` gives the search
and ``/api/pull`` (its ``dry_run`` and preflight) the devices a load would find:
what loaded models hold counts as free, since they would be evicted.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request

from localllm.api.wire import SearchResponse
from localllm.models import search as models_search
from localllm.models.remote import Machine, this_machine
from localllm.server.deps import app_limiter
from localllm.store.search import DEADLINE_S

router = APIRouter()
SEARCH_THREADS = 3


def machine_of(request: Request) -> Callable[[], Machine]:
    """This machine for planning, read when called (the probe may run: call it in a
    thread); the loaded models' plans are taken now, on the event loop (a model the
    planner did not place has none)."""
    scheduler = request.app.state.scheduler
    plans = [m.placement.plan for m in scheduler.loaded() if m.placement.plan is not None]
    return functools.partial(this_machine, plans)


def search_threads(request: Request) -> anyio.CapacityLimiter:
    """The app's limiter for searches."""
    return app_limiter(request, "search_threads", SEARCH_THREADS)


def _search(q: str, limit: int, machine: Callable[[], Machine], end: float) -> SearchResponse:
    return models_search.search(q, limit, machine, deadline_s=end - time.monotonic())


@router.get("/api/search")
async def search(request: Request, q: str = "", limit: int = 10) -> dict[str, Any]:
    end = time.monotonic() + DEADLINE_S
    found = await anyio.to_thread.run_sync(
        functools.partial(_search, q, limit, machine_of(request), end),
        limiter=search_threads(request),
    )
    # Annotated as a plain dict: FastAPI would make a response model of a TypedDict.
    return {"models": found["models"]}
