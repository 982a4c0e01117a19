"""Runner-test helpers: run coroutines with a deadline, spawn fake-engine runners
(fake_engine.py), read their answers, tell whether a process lives."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from localllm.runner.messages import CompletionRequest, Done, LoadOptions, Piece, SamplingParams
from localllm.runner.process import RunnerProcess

T = TypeVar("T")

FAKE_ENV = {"LOCALLLM_RUNNER_ENGINE": "tests.support.fake_engine:FakeEngine"}


def arun(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Run a coroutine on a fresh loop; a hang becomes a failure, not a stuck suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def start_fake(
    path: str = "/models/fake.gguf",
    *,
    n_parallel: int = 4,
    load_timeout: float = 30.0,
    runner_timeout: float | None = None,
) -> RunnerProcess:
    return await RunnerProcess.start(
        [path],
        LoadOptions(n_ctx=128, n_parallel=n_parallel, n_threads=1),
        load_timeout=load_timeout,
        runner_timeout=runner_timeout,
        env=FAKE_ENV,
    )


@contextlib.asynccontextmanager
async def running(start: Awaitable[RunnerProcess]) -> AsyncIterator[RunnerProcess]:
    """The runner ``start`` gives, closed when the block ends (the name stays usable)."""
    runner = await start
    try:
        yield runner
    finally:
        await runner.close()


def greedy(req_id: str, prompt: str | list[int], num_predict: int = -1) -> CompletionRequest:
    return CompletionRequest(
        id=req_id,
        prompt=prompt,
        num_predict=num_predict,
        sampling=SamplingParams(temperature=0.0, seed=1),
    )


async def collect(runner: RunnerProcess, req: CompletionRequest) -> tuple[str, Done]:
    text: list[str] = []
    async for event in runner.complete(req):
        if isinstance(event, Piece):
            text.append(event.text)
        else:
            return "".join(text), event
    raise AssertionError("stream ended without Done")


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
