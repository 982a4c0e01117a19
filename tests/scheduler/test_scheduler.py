"""Scheduler unit tests with an in-test fake runner (queueing, keep-alive, eviction, reloads).

The real runner is exercised by the runner and server tests; here only the
scheduling decisions are under test.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from localllm.errors import ServerBusy
from localllm.runner.messages import LoadOptions
from localllm.scheduler.scheduler import ModelSpec
from tests.support.sched_harness import Harness, run


def spec(name: str) -> ModelSpec:
    return ModelSpec(name=name, key=f"/blobs/{name}", model_paths=(f"/blobs/{name}",))


async def hold(
    h: Harness,
    name: str,
    opts: LoadOptions,
    keep: float,
    release: asyncio.Event,
    entered: asyncio.Event | None = None,
) -> None:
    async with h.sched.use(spec(name), opts, keep):
        if entered:
            entered.set()
        await release.wait()


def test_same_model_shares_one_runner_and_keep_alive_expires() -> None:
    async def main() -> None:
        h = Harness()
        opts = LoadOptions(n_parallel=2)
        async with h.sched.use(spec("a"), opts, 0.2):
            pass
        async with h.sched.use(spec("a"), opts, 0.2) as model:
            assert math.isinf(model.expires_at)
        assert len(h.started) == 1
        (model,) = h.sched.loaded()
        assert model.expires_at < math.inf
        await asyncio.sleep(0.4)
        assert h.sched.loaded() == []
        assert h.started[0].closed

    run(main())


def test_keep_alive_zero_unloads_and_negative_keeps_forever() -> None:
    async def main() -> None:
        h = Harness()
        async with h.sched.use(spec("a"), LoadOptions(), 0):
            pass
        assert h.sched.loaded() == []
        async with h.sched.use(spec("b"), LoadOptions(), math.inf):
            pass
        (model,) = h.sched.loaded()
        assert model.timer is None and math.isinf(model.expires_at)

    run(main())


def test_queue_full_is_503() -> None:
    async def main() -> None:
        h = Harness(max_queue=2)
        release = asyncio.Event()
        entered = asyncio.Event()
        opts = LoadOptions(n_parallel=1)
        holder = asyncio.create_task(hold(h, "a", opts, 60, release, entered))
        await entered.wait()
        waiters = [asyncio.create_task(hold(h, "a", opts, 60, release)) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert h.sched.pending == 2
        with pytest.raises(ServerBusy, match="maximum pending requests exceeded"):
            async with h.sched.use(spec("a"), opts, 60):
                pass
        release.set()
        await asyncio.gather(holder, *waiters)
        assert h.sched.pending == 0

    run(main())


def test_slots_bound_concurrency() -> None:
    async def main() -> None:
        h = Harness()
        active = 0
        peak = 0

        async def one() -> None:
            nonlocal active, peak
            async with h.sched.use(spec("a"), LoadOptions(n_parallel=3), 60):
                active += 1
                peak = max(peak, active)
                await asyncio.sleep(0.05)
                active -= 1

        await asyncio.gather(*(one() for _ in range(8)))
        assert peak == 3
        assert len(h.started) == 1

    run(main())


def test_max_loaded_evicts_idle_model() -> None:
    async def main() -> None:
        h = Harness(max_loaded=1)
        async with h.sched.use(spec("a"), LoadOptions(), 60):
            pass
        async with h.sched.use(spec("b"), LoadOptions(), 60):
            pass
        assert [m.spec.name for m in h.sched.loaded()] == ["b"]
        assert h.started[0].closed

    run(main())


def test_eviction_waits_for_busy_model() -> None:
    async def main() -> None:
        h = Harness()
        h.fits = False
        release = asyncio.Event()
        entered = asyncio.Event()
        holder = asyncio.create_task(hold(h, "a", LoadOptions(), 60, release, entered))
        await entered.wait()
        second = asyncio.create_task(hold(h, "b", LoadOptions(), 60, asyncio.Event()))
        await asyncio.sleep(0.1)
        assert len(h.started) == 1  # b waits: a is busy and both don't fit
        release.set()
        await holder
        await asyncio.sleep(0.1)
        assert len(h.started) == 2 and h.started[0].closed
        second.cancel()

    run(main())


def test_load_option_change_reloads_but_seed_does_not() -> None:
    async def main() -> None:
        h = Harness()
        async with h.sched.use(spec("a"), LoadOptions(n_ctx=2048), 60):
            pass
        async with h.sched.use(spec("a"), LoadOptions(n_ctx=2048, seed=7), 60):
            pass
        assert len(h.started) == 1
        async with h.sched.use(spec("a"), LoadOptions(n_ctx=4096), 60) as model:
            assert model.opts.n_ctx == 4096
        assert len(h.started) == 2 and h.started[0].closed

    run(main())


def test_dead_runner_is_replaced() -> None:
    async def main() -> None:
        h = Harness()
        async with h.sched.use(spec("a"), LoadOptions(), 60):
            pass
        h.started[0].dead = True
        async with h.sched.use(spec("a"), LoadOptions(), 60) as model:
            assert model.runner is h.started[1]

    run(main())


def test_cancelled_waiter_leaves_no_trace() -> None:
    async def main() -> None:
        h = Harness()
        release = asyncio.Event()
        entered = asyncio.Event()
        opts = LoadOptions(n_parallel=1)
        holder = asyncio.create_task(hold(h, "a", opts, 60, release, entered))
        await entered.wait()
        waiter = asyncio.create_task(hold(h, "a", opts, 60, release))
        await asyncio.sleep(0.05)
        waiter.cancel()
        await asyncio.sleep(0.01)
        assert h.sched.pending == 0
        release.set()
        await holder
        (model,) = h.sched.loaded()
        assert model.refcount == 0

    run(main())


def test_a_different_num_parallel_reloads_with_that_many_slots() -> None:
    # A Modelfile's num_parallel arrives as LoadOptions.n_parallel, a load option like
    # num_ctx: another value reloads the runner, the same value shares it.
    async def main() -> None:
        h = Harness()
        async with h.sched.use(spec("a"), LoadOptions(n_parallel=4), 60):
            pass
        async with h.sched.use(spec("a"), LoadOptions(n_parallel=4), 60):
            pass
        assert len(h.started) == 1
        async with h.sched.use(spec("a"), LoadOptions(n_parallel=2), 60) as model:
            assert model.opts.n_parallel == 2 and h.started[-1].opts.n_parallel == 2
        assert len(h.started) == 2 and h.started[0].closed
        # Its slots bound concurrency: a third request waits for one of two.
        release = asyncio.Event()
        entered = [asyncio.Event() for _ in range(3)]
        holders = [
            asyncio.create_task(hold(h, "a", LoadOptions(n_parallel=2), 60, release, e))
            for e in entered
        ]
        while sum(e.is_set() for e in entered) < 2 or h.sched.pending < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert sum(e.is_set() for e in entered) == 2 and h.sched.pending == 1
        release.set()
        await asyncio.gather(*holders)
        assert all(e.is_set() for e in entered) and len(h.started) == 2

    run(main())
