"""The runner watchdog with the fake engine: a stopped child is killed and its requests
fail within the bound; a long load or a long step (alive, heartbeat running) is not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest

from localllm.errors import ModelLoadError, RunnerCrashed
from localllm.runner.watchdog import heartbeat_interval
from tests.support.fake_engine import LONG_S
from tests.support.runners import arun, collect, greedy, pid_alive, running, start_fake

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

BOUND = 1.0  # LOCALLLM_RUNNER_TIMEOUT for these tests
SLACK = 1.5  # the watchdog's wake-up step, the kill, a busy 2-core machine


def _reap_if_stopped(pid: int) -> None:
    # Without the fix the child stays stopped; never leave one behind.
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_stopped_runner_mid_stream_is_killed_and_every_request_fails() -> None:
    async def go() -> None:
        runner = await start_fake(runner_timeout=BOUND)
        try:
            other = asyncio.ensure_future(collect(runner, greedy("other", "x", -1)))
            n = 0
            with pytest.raises(
                RunnerCrashed,
                match=r"stopped responding .*"
                r"LOCALLLM_RUNNER_TIMEOUT is 1s",
            ):
                async for _ in runner.complete(greedy("s", "x", -1)):
                    n += 1
                    if n == 2:
                        os.kill(runner.pid, signal.SIGSTOP)
                        stopped = time.monotonic()
            waited = time.monotonic() - stopped
            assert BOUND <= waited < BOUND + SLACK, waited
            with pytest.raises(RunnerCrashed, match="stopped responding"):
                await other
            assert not runner.alive and runner.returncode == -signal.SIGKILL
            assert runner.death is not None and "stopped responding" in runner.death
            await runner.close()
            assert not pid_alive(runner.pid)
        finally:
            _reap_if_stopped(runner.pid)

    arun(go(), timeout=20)


def test_close_kills_a_stopped_idle_runner_after_a_few_missed_beats() -> None:
    async def go() -> None:
        # A bound longer than the missed beats take (0.5 s each at 4 s): close() must
        # not wait for the bound, nor for its own 5 s grace.
        runner = await start_fake(runner_timeout=4.0)
        try:
            assert (await collect(runner, greedy("a", "x", 2)))[0] == "0 1 "
            os.kill(runner.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            await runner.close()
            took = time.monotonic() - t0
            assert took < 4 * heartbeat_interval(4.0) + SLACK, took
            assert not pid_alive(runner.pid) and runner.returncode == -signal.SIGKILL
            assert runner.death is None  # we ended it: not a failure to report
        finally:
            _reap_if_stopped(runner.pid)

    arun(go(), timeout=20)


def test_long_load_and_long_step_do_not_trip_it() -> None:
    assert LONG_S > BOUND  # each is longer than the bound, and alive throughout

    async def go() -> None:
        async with running(start_fake("/models/longload.gguf", runner_timeout=BOUND)) as runner:
            text, done = await collect(runner, greedy("l", "longstep", 3))
            assert text == "0 1 2 " and done.reason == "length"
            assert runner.alive

    arun(go(), timeout=20)


def test_a_runner_that_stops_during_its_load_fails_the_load_within_the_bound() -> None:
    async def go() -> None:
        t0 = time.monotonic()
        with pytest.raises(ModelLoadError, match="stopped responding"):
            await start_fake("/models/stopload.gguf", runner_timeout=BOUND, load_timeout=60)
        assert time.monotonic() - t0 < BOUND + SLACK + 2  # + the child's start

    arun(go(), timeout=30)


def test_a_step_that_never_returns_is_killed_though_the_heartbeat_runs() -> None:
    """A native call that hangs with the GIL released: beats go on, the step does not end."""
    from localllm.runner.watchdog import STEP_FLOOR

    async def go() -> None:
        bound = 0.3  # a stuck step then counts after STEP_FLOOR x 0.3 = 3 s
        async with running(start_fake("/models/m.gguf", runner_timeout=bound)) as runner:
            t0 = time.monotonic()
            with pytest.raises(RunnerCrashed, match="stuck: one engine step ran"):
                await collect(runner, greedy("h", "hangstep", 5))
            waited = time.monotonic() - t0
            assert STEP_FLOOR * bound <= waited < STEP_FLOOR * bound + SLACK + 1
            assert not runner.alive

    arun(go(), timeout=30)
