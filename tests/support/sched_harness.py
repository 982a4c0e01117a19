"""A scheduler on fake runners that load in 10 ms, and a deadline runner for its coroutines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from localllm.errors import RunnerCrashed
from localllm.runner.messages import CompletionRequest, Done, LoadOptions, Piece
from localllm.scheduler.scheduler import ModelSpec, Placement, Scheduler


class FakeRunner:
    def __init__(self, paths: list[str], opts: LoadOptions) -> None:
        self.paths = paths
        self.opts = opts
        self.closed = False
        self.dead = False
        self.pid = 1
        self.info: dict[str, Any] = {}
        self.memory: dict[str, dict[str, int]] = {}
        self.load_duration = 0

    @property
    def alive(self) -> bool:
        return not self.closed and not self.dead

    async def complete(self, req: CompletionRequest) -> AsyncIterator[Piece | Done]:
        if self.dead:
            raise RunnerCrashed("dead")
        yield Piece(req.id, "x")
        yield Done(req.id, "stop")

    async def cancel(self, req_id: str) -> None:
        return None

    async def embed(
        self, inputs: list[str], truncate: bool = True
    ) -> tuple[list[list[float]], int]:
        return [], 0

    async def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return []

    async def detokenize(self, tokens: list[int], special: bool = False) -> str:
        return ""

    async def close(self) -> None:
        self.closed = True


class Harness:
    def __init__(self, **kw: Any) -> None:
        self.started: list[FakeRunner] = []
        self.fits = True
        self.sched = Scheduler(self.start, self.plan, **kw)

    async def start(
        self, paths: list[str], opts: LoadOptions, *, load_timeout: float | None = None
    ) -> FakeRunner:
        await asyncio.sleep(0.01)
        runner = FakeRunner(paths, opts)
        self.started.append(runner)
        return runner

    def plan(self, spec: ModelSpec, opts: LoadOptions, others: list[Any]) -> Placement:
        return Placement(opts=opts, fits=self.fits or not others)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))
