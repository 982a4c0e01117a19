"""A draft model in planning and scheduling: its cost (weights, KV for the model's cells,
compute), the device it is counted on, what it takes from the model, and reloads."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from localllm.hardware.cpu import CPUInfo
from localllm.hardware.detect import Hardware
from localllm.runner.messages import LoadOptions
from localllm.scheduler.draft import draft_cost
from localllm.scheduler.estimate import graph_bytes, kv_cells, kv_layer_bytes
from localllm.scheduler.placement import make_plan_fn
from localllm.scheduler.planner import PlanOptions, plan
from localllm.scheduler.scheduler import ModelSpec
from tests.support.sched_harness import Harness, run
from tests.support.shapes import ALL_SHAPES, GiB, cpu, cuda
from tests.support.tinymodel import make_tiny_model

L8B = ALL_SHAPES["llama3.1-8b"]
DRAFT = ALL_SHAPES["llama3.2-1b"]  # tied embeddings: its output duplicates token_embd


def test_the_cost_counts_weights_kv_for_the_models_cells_and_a_graph() -> None:
    ram = draft_cost(DRAFT, 4096, 2, 512, "f16", True, on_gpu=False)
    kv = kv_layer_bytes(DRAFT, kv_cells(4096, 2), "f16") * DRAFT.n_layers
    assert (ram.ram_kv, ram.gpu_total) == (kv, 0)
    body = sum(DRAFT.layer_bytes) + DRAFT.output_bytes + DRAFT.other_bytes
    assert ram.ram_weights == body + DRAFT.token_embd_bytes
    assert ram.ram_graph == graph_bytes(DRAFT, 4096, 2, 512, True, kv)[0]
    gpu = draft_cost(DRAFT, 4096, 2, 512, "f16", True, on_gpu=True)
    # On a GPU the input embedding stays in RAM, as for any model.
    assert (gpu.gpu_weights, gpu.gpu_kv, gpu.ram_weights, gpu.ram_kv) == (
        body,
        kv,
        DRAFT.token_embd_bytes,
        0,
    )
    assert gpu.gpu_graph == ram.ram_graph and 0 < gpu.ram_graph < gpu.gpu_graph
    q8 = draft_cost(DRAFT, 4096, 2, 512, "q8_0", True, on_gpu=False)
    assert q8.ram_kv < kv  # the model's cache type


def test_cpu_only_keeps_the_draft_in_ram() -> None:
    opts = PlanOptions(num_ctx=4096, num_parallel=2)
    base = plan(L8B, [cpu(64)], opts)
    with_draft = plan(L8B, [cpu(64)], dataclasses.replace(opts, draft=DRAFT))
    cost = draft_cost(DRAFT, 4096, 2, 512, "f16", True, on_gpu=False)
    assert with_draft.cpu.weights == base.cpu.weights + cost.ram_weights
    assert with_draft.cpu.kv == base.cpu.kv + cost.ram_kv
    assert with_draft.cpu.graph == base.cpu.graph + cost.ram_graph
    assert with_draft.n_ctx == base.n_ctx and with_draft.fits


def test_with_gpus_the_draft_goes_on_the_first_device_holding_layers() -> None:
    opts = PlanOptions(num_ctx=8192)
    devs = [cpu(64), cuda(0, 24)]
    base = plan(L8B, devs, opts)
    with_draft = plan(L8B, devs, dataclasses.replace(opts, draft=DRAFT))
    cost = draft_cost(
        DRAFT, 8192, 1, 512, with_draft.kv_type, with_draft.flash_attention, on_gpu=True
    )
    assert base.fully_offloaded and with_draft.fully_offloaded
    assert with_draft.vram == base.vram + cost.gpu_total
    assert with_draft.gpus[0].kv == base.gpus[0].kv + cost.gpu_kv
    assert with_draft.ram == base.ram + cost.ram_weights + cost.ram_graph
    # Split over two GPUs: only llama.cpp's first device carries it.
    two = [cpu(64), cuda(0, 6), cuda(1, 6)]
    base = plan(L8B, two, PlanOptions(num_ctx=4096))
    split = plan(L8B, two, PlanOptions(num_ctx=4096, draft=DRAFT))
    kv_l = kv_layer_bytes(L8B, kv_cells(4096, 1), split.kv_type)
    cost = draft_cost(DRAFT, 4096, 1, 512, split.kv_type, split.flash_attention, on_gpu=True)
    first, last = split.gpus  # the last holds the top layers and the output layer
    assert first.kv == first.layers * kv_l + cost.gpu_kv
    assert last.kv == (last.layers - 1) * kv_l
    assert first.layers < base.gpus[0].layers  # it made room there


def test_a_partly_offloaded_model_still_puts_its_draft_on_the_gpu() -> None:
    opts = PlanOptions(num_ctx=4096, num_gpu=10)
    base = plan(L8B, [cpu(64), cuda(0, 24)], opts)
    with_draft = plan(L8B, [cpu(64), cuda(0, 24)], dataclasses.replace(opts, draft=DRAFT))
    cost = draft_cost(
        DRAFT, 4096, 1, 512, with_draft.kv_type, with_draft.flash_attention, on_gpu=True
    )
    assert with_draft.n_gpu_layers == base.n_gpu_layers == 10
    assert with_draft.vram == base.vram + cost.gpu_total


def test_a_draft_takes_room_from_the_models_layers_or_context() -> None:
    devs = [cpu(64), cuda(0, 6.5)]  # an 8B Q4 model only just (not quite) fits
    base = plan(L8B, devs, PlanOptions(num_ctx=4096))
    tight = plan(L8B, devs, PlanOptions(num_ctx=4096, draft=DRAFT))
    assert tight.n_gpu_layers < base.n_gpu_layers
    # An automatic context steps down before layers leave the GPU.
    auto = [cpu(64), cuda(0, 24, free_gib=12)]
    alone = plan(L8B, auto, PlanOptions())
    drafted = plan(L8B, auto, PlanOptions(draft=DRAFT))
    assert (alone.n_ctx, alone.fully_offloaded) == (32768, True)
    assert (drafted.n_ctx, drafted.fully_offloaded, drafted.ctx_reduced) == (16384, True, True)


def test_the_plan_fn_reads_the_drafts_header(tmp_path: Path) -> None:
    path = make_tiny_model(tmp_path, attention=True)
    hw = Hardware(
        devices=(cpu(64),),
        cpu=CPUInfo("test", "x86_64", 2, 2, 64 * GiB, 64 * GiB, ()),
        native_ok=True,
        native_error="",
        system_info="",
    )
    plan_fn = make_plan_fn(lambda: hw)
    spec = ModelSpec(name="m", key="m", model_paths=("m",), info=L8B)
    opts = LoadOptions(n_ctx=4096)
    without = plan_fn(spec, opts, []).plan
    spec = dataclasses.replace(spec, draft=str(path))  # no draft_info: read from the file
    with_draft = plan_fn(spec, opts, []).plan
    assert with_draft.cpu.kv > without.cpu.kv
    assert with_draft.cpu.weights > without.cpu.weights


def test_the_scheduler_loads_the_draft_and_reloads_when_it_changes() -> None:
    async def main() -> None:
        h = Harness()
        spec = ModelSpec(name="m", key="/blobs/m", model_paths=("/blobs/m",), draft="/blobs/d1")
        async with h.sched.use(spec, LoadOptions(), 0.5):
            pass
        async with h.sched.use(spec, LoadOptions(), 0.5):
            pass
        assert [r.opts.draft for r in h.started] == ["/blobs/d1"]  # one runner
        other = dataclasses.replace(spec, draft="/blobs/d2")
        async with h.sched.use(other, LoadOptions(), 0):
            pass
        assert [r.opts.draft for r in h.started] == ["/blobs/d1", "/blobs/d2"]
        await h.sched.shutdown()

    run(main())
    asyncio.set_event_loop(None)
