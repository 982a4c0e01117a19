"""``GET /health`` (liveness) and ``GET /health/ready`` (can the daemon take work now?).

Liveness answers from the event loop without touching the store, the
scheduler or any model, so it stays fast while a model loads or generates,
and a supervisor restarts the daemon only when the loop itself is stuck.
Readiness checks what would make a new request fail at once: the daemon is
draining for shutdown, the request queue is full, the model store cannot
be read, its disk has less free space than LOCALLLM_MIN_FREE_DISK (a pull or
create would fail part-way), or a model's runner died (crashed, or was killed by
the watchdog for not responding) and the model has not loaded again since.  It answers 503
with the reasons so a load balancer (and a person) knows why.

``Lifecycle`` is the shared shutdown state: the request middleware counts
requests in flight and refuses new ones while ``draining``; ``serve`` starts
the drain on SIGTERM/SIGINT and exits once the count reaches zero.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from localllm import config
from localllm.format import format_bytes
from localllm.store.diskspace import free_space

router = APIRouter()

SHUTTING_DOWN = "server is shutting down"


@dataclass
class Lifecycle:
    """Whether the daemon is draining, and how many requests it still serves."""

    draining: bool = False
    in_flight: int = 0
    deadline: float = math.inf  # time.monotonic() by which the drain gives up

    def begin_drain(self, grace: float) -> bool:
        """Start draining; False if already draining (a second signal)."""
        if self.draining:
            return False
        self.draining = True
        self.deadline = time.monotonic() + grace
        return True

    def drained(self) -> bool:
        return self.draining and (self.in_flight <= 0 or time.monotonic() >= self.deadline)


@router.api_route("/health", methods=["GET", "HEAD"])
async def health() -> dict[str, str]:
    # ``async``: a plain ``def`` would wait for a worker thread, and the pool may
    # be busy with store work (uploads, pulls) exactly when a probe matters.
    return {"status": "ok"}


@router.api_route("/health/ready", methods=["GET", "HEAD"])
async def ready(request: Request) -> JSONResponse:
    # Async for the same reason; the checks are a few syscalls at most.
    problems = _problems(request.app.state)
    if problems:
        return JSONResponse({"status": "unavailable", "reasons": problems}, status_code=503)
    return JSONResponse({"status": "ready"})


def _problems(state: Any) -> list[str]:
    problems: list[str] = []
    lifecycle: Lifecycle | None = getattr(state, "lifecycle", None)
    if lifecycle is not None and lifecycle.draining:
        problems.append(SHUTTING_DOWN)
    scheduler = getattr(state, "scheduler", None)
    if scheduler is not None and scheduler.pending >= scheduler.max_queue:
        problems.append(f"request queue is full ({scheduler.pending} pending)")
    failures = getattr(scheduler, "failures", None)
    if callable(failures):
        for name, why in sorted(failures().items()):
            # The first line: a crash's message goes on with the runner's log tail.
            problems.append(f"model {name} failed: {why.splitlines()[0] if why else why}")
    store = getattr(state, "store", None)
    if store is not None:
        for reason in (_store_problem(store.root), _disk_problem(store.root)):
            if reason:
                problems.append(reason)
    return problems


def _disk_problem(root: Any) -> str | None:
    minimum = config.MIN_FREE_DISK.get()
    if minimum <= 0:
        return None
    try:
        where, free = free_space(Path(root))
    except OSError as exc:
        return f"cannot tell free disk space of the model store: {exc.strerror or exc}"
    if free >= minimum:
        return None
    return (
        f"low disk space: {format_bytes(free)} ({free} bytes) free on {where}, "
        f"below LOCALLLM_MIN_FREE_DISK ({format_bytes(minimum)})"
    )


def _store_problem(root: Any) -> str | None:
    # A store that does not exist yet is fine (nothing pulled); one that exists
    # must be a readable folder, or every model request would fail.
    try:
        os.listdir(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"model store is not readable: {exc.strerror or exc}"
    if not os.access(root, os.R_OK | os.X_OK):
        return "model store is not readable: permission denied"
    return None
