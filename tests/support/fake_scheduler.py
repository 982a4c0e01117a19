"""An in-process fake runner and a scheduler built on it, for route tests without children."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from localllm.runner.messages import CompletionRequest, Done, LoadOptions, Piece
from localllm.scheduler.scheduler import Placement, Scheduler


class FakeRunner:
    """Answers every completion with ``num_predict`` (at most 8) pieces of "x"."""

    def __init__(self, paths: list[str], opts: LoadOptions) -> None:
        self.pid = 1
        self.info: dict[str, Any] = {}
        self.memory: dict[str, dict[str, int]] = {"CPU": {"weights": 1000, "kv": 24}}
        self.load_duration = 0
        self.closed = False

    @property
    def alive(self) -> bool:
        return not self.closed

    async def complete(self, req: CompletionRequest) -> AsyncIterator[Piece | Done]:
        n = 8 if req.num_predict is None or req.num_predict < 0 else min(req.num_predict, 8)
        for _ in range(n):
            await asyncio.sleep(0)
            yield Piece(req.id, "x", token=5)
        prompt = len(req.prompt) if isinstance(req.prompt, (str, list)) else 1
        yield Done(req.id, "length" if n else "stop", prompt_tokens=prompt, eval_count=n)

    async def cancel(self, req_id: str) -> None:
        return None

    async def embed(
        self, inputs: list[str], truncate: bool = True
    ) -> tuple[list[list[float]], int]:
        return [[1.0, 0.0] for _ in inputs], len(inputs)

    async def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        # -1 a character of the option, as the stand-in engine scores (fake_engine.py).
        read = sum(len(p) for p in prompts)
        return [[-float(len(o)) for o in opts] for opts in options], read, read

    async def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return [5] * len(text)

    async def detokenize(self, tokens: list[int], special: bool = False) -> str:
        return "x" * len(tokens)

    async def close(self) -> None:
        self.closed = True


async def _start(
    paths: list[str], opts: LoadOptions, *, load_timeout: float | None = None
) -> FakeRunner:
    return FakeRunner(paths, opts)


def fake_scheduler(**kw: Any) -> Scheduler:
    return Scheduler(_start, lambda spec, opts, others: Placement(opts=opts, size=1024), **kw)
