"""``GET /api/search``: Hugging Face GGUF models for a query, each quant's fit on this machine.

Not in Ollama's API (its library is searched on its website only).  The work,
Hub requests and a header read per repo, bounded in time (store/search.py), runs
in a worker thread.  ``machine_of`` gives the search
and ``/api/pull`` (its ``dry_run`` and preflight) the devices a load would find:
what loaded models hold counts as free, since they would be evicted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request

from localllm import services_hub
from localllm.services_hub import Machine, this_machine

router = APIRouter()


def machine_of(request: Request) -> Callable[[], Machine]:
    """This machine for planning, read when called (the probe may run: call it in a
    thread); the loaded models' plans are taken now, on the event loop."""
    from localllm.scheduler.planner import LoadPlan

    scheduler = request.app.state.scheduler
    plans = [
        p
        for m in scheduler.loaded()
        if isinstance(p := getattr(m.placement, "plan", None), LoadPlan)
    ]
    return functools.partial(this_machine, plans)


@router.get("/api/search")
async def search(request: Request, q: str = "", limit: int = 10) -> dict[str, Any]:
    # Mostly waiting on the Hub: anyio's thread pool, not the CPU limiter of ``offload``.
    found = await anyio.to_thread.run_sync(
        functools.partial(services_hub.search, q, limit, machine_of(request))
    )
    # Annotated as a plain dict: FastAPI would make a response model of a TypedDict.
    return {"models": found["models"]}
