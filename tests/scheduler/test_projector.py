"""A vision projector in planning and scheduling: its cost, where the planner puts it, reloads."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from localllm.runner.messages import LoadOptions
from localllm.scheduler.planner import PlanOptions, plan
from localllm.scheduler.projector import projector_cost
from localllm.scheduler.scheduler import ModelSpec
from tests.support.sched_harness import Harness, run
from tests.support.shapes import ALL_SHAPES, GiB, cpu, cuda
from tests.support.visionmodel import N_IMAGE_TOKENS, make_projector

L8B = ALL_SHAPES["llama3.1-8b"]
W, C = 800 * 1024 * 1024, 40 * 1024 * 1024  # a SigLIP-400M-sized projector


@pytest.fixture(scope="module")
def projector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_projector(tmp_path_factory.mktemp("mmproj"))


def test_cost_counts_tensors_and_one_image_of_compute(projector: Path) -> None:
    cost = projector_cost(projector)
    assert 0 < cost.weights < projector.stat().st_size
    assert cost.image_tokens == N_IMAGE_TOKENS
    assert cost.compute > 3 * 4 * 32 * 32  # at least the f32 input image
    assert cost.total == cost.weights + cost.compute


def test_cpu_only_keeps_the_projector_in_ram() -> None:
    base = plan(L8B, [cpu(64)], PlanOptions(num_ctx=4096))
    with_proj = plan(
        L8B, [cpu(64)], PlanOptions(num_ctx=4096, projector_weights=W, projector_compute=C)
    )
    assert with_proj.cpu.weights == base.cpu.weights + W
    assert with_proj.cpu.graph == base.cpu.graph + C
    assert with_proj.ram == base.ram + W + C


def test_with_a_gpu_the_projector_goes_on_the_first_device() -> None:
    devs = [cpu(64), cuda(0, 24)]
    base = plan(L8B, devs, PlanOptions(num_ctx=4096))
    with_proj = plan(L8B, devs, PlanOptions(num_ctx=4096, projector_weights=W, projector_compute=C))
    assert with_proj.fully_offloaded and base.fully_offloaded
    assert with_proj.vram == base.vram + W + C
    assert with_proj.cpu == base.cpu


def test_a_projector_that_leaves_no_room_costs_layers() -> None:
    devs = [cpu(64), cuda(0, 6.5)]  # an 8B Q4 model only just fits
    base = plan(L8B, devs, PlanOptions(num_ctx=4096))
    big = plan(L8B, devs, PlanOptions(num_ctx=4096, projector_weights=2 * GiB))
    assert big.n_gpu_layers < base.n_gpu_layers


def test_the_scheduler_loads_the_projector_and_reloads_when_it_changes() -> None:
    async def main() -> None:
        h = Harness()
        spec = ModelSpec(name="v", key="/blobs/v", model_paths=("/blobs/v",), projector="/blobs/p1")
        async with h.sched.use(spec, LoadOptions(), 0.5):
            pass
        assert h.started[-1].opts.projector == "/blobs/p1"
        async with h.sched.use(spec, LoadOptions(), 0.5):
            pass
        assert len(h.started) == 1  # same projector: same runner
        other = dataclasses.replace(spec, projector="/blobs/p2")
        async with h.sched.use(other, LoadOptions(), 0):
            pass
        assert [r.opts.projector for r in h.started] == ["/blobs/p1", "/blobs/p2"]
        await h.sched.shutdown()

    run(main())
    asyncio.set_event_loop(None)
