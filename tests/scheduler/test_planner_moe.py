"""MoE models: experts of the lowest layers kept in RAM (llama.cpp's --n-cpu-moe)."""

from __future__ import annotations

import pytest

from localllm.runner.messages import LoadOptions
from localllm.scheduler.planner import PlanOptions, plan
from tests.support.shapes import ALL_SHAPES, QWEN3_MOE, GiB, cpu, cuda, rpc

MOE = QWEN3_MOE  # Qwen3-30B-A3B Q4_K_M: 48 layers, 19.8 GB, experts 97% of each layer
EXPERTS = MOE.expert_bytes[0]


def opts(**kw: object) -> PlanOptions:
    return PlanOptions(**kw)  # type: ignore[arg-type]


def test_shape_matches_the_real_file() -> None:
    assert abs(MOE.file_size - 18.6e9) / 18.6e9 < 0.07  # the published Q4_K_M is 18.6 GB
    assert len(MOE.expert_bytes) == 48 and 0.95 < EXPERTS / MOE.layer_bytes[0] < 1


def test_fewest_experts_in_ram_that_offload_every_layer() -> None:
    dev = cuda(0, 12)
    p = plan(MOE, [dev, cpu(64)], opts(num_ctx=8192))
    k = p.n_cpu_moe
    assert 0 < k < 48 and p.fully_offloaded and p.fits and p.n_gpu_layers == 49
    gpu = p.gpus[0]
    assert gpu.weights == sum(MOE.layer_bytes) - k * EXPERTS + MOE.output_bytes
    assert p.cpu.weights == MOE.token_embd_bytes + k * EXPERTS
    assert p.reason.startswith(f"experts of {k}/48 layers in RAM (MoE), all 49 layers on CUDA0 (")
    # The smallest count: room for one more layer's experts keeps exactly one more on the GPU.
    roomier = cuda(0, 12, (dev.free + EXPERTS) / GiB)
    assert plan(MOE, [roomier, cpu(64)], opts(num_ctx=8192)).n_cpu_moe == k - 1
    load = p.apply(LoadOptions(n_gpu_layers=-1))
    assert (load.n_cpu_moe, load.n_gpu_layers, load.devices, load.split_mode, load.main_gpu) == (
        k,
        49,
        ["CUDA0"],
        "none",
        0,
    )


def test_more_vram_never_means_more_experts_in_ram() -> None:
    last = 48
    for tenths in range(40, 260, 5):
        p = plan(MOE, [cuda(0, tenths / 10), cpu(64)], opts(num_ctx=8192))
        if p.fully_offloaded:
            assert p.n_cpu_moe <= last, tenths
            last = p.n_cpu_moe
        else:
            assert p.n_cpu_moe == 0 and last == 48  # only below the first full offload
    assert last == 0


def test_a_model_that_fits_keeps_its_experts_on_the_gpus() -> None:
    assert plan(MOE, [cuda(0, 24), cpu(64)], opts(num_ctx=8192)).n_cpu_moe == 0
    # A second GPU beats experts in RAM.
    two = plan(MOE, [cuda(0, 12), cuda(1, 12), cpu(64)], opts(num_ctx=8192))
    assert two.n_cpu_moe == 0 and len(two.gpus) == 2 and two.fully_offloaded


def test_experts_in_ram_across_gpus_and_remote_devices() -> None:
    p = plan(MOE, [cuda(0, 8), cuda(1, 8), cpu(64)], opts(num_ctx=8192))
    assert p.n_cpu_moe > 0 and p.fully_offloaded and len(p.gpus) == 2
    load = p.apply(LoadOptions())
    assert load.devices == ["CUDA0", "CUDA1"] and load.split_mode == "layer"
    assert sum(load.tensor_split) == 49 and load.n_cpu_moe == p.n_cpu_moe
    # A remote device holds the rest before experts leave the GPUs.
    far = plan(
        MOE, [cuda(0, 8), cuda(1, 8), rpc("10.0.0.2:50052", 12), cpu(64)], opts(num_ctx=8192)
    )
    assert far.n_cpu_moe == 0 and far.fully_offloaded and far.gpus[0].name.startswith("RPC[")


def test_falls_back_to_partial_offload_when_experts_in_ram_are_not_enough() -> None:
    # All experts in RAM still leave 1.5 GiB of other weights and KV cache for 1.1 GiB.
    p = plan(MOE, [cuda(0, 3), cpu(64)], opts(num_ctx=8192))
    assert p.n_cpu_moe == 0 and 0 < p.n_gpu_layers < 49 and p.fits
    assert p.reason.startswith(f"{p.n_gpu_layers}/49 layers on CUDA0, rest on CPU")


def test_experts_need_room_in_ram() -> None:
    # 12 GiB of VRAM needs ~9 GiB of experts in RAM; with 6 GiB free the usual
    # partial offload is the better plan (it does not fit either, and says so).
    p = plan(MOE, [cuda(0, 12), cpu(6)], opts(num_ctx=8192))
    assert p.n_cpu_moe == 0 and not p.fully_offloaded


def test_a_forced_num_gpu_is_kept() -> None:
    forced = plan(MOE, [cuda(0, 12), cpu(64)], opts(num_ctx=8192, num_gpu=49))
    assert forced.n_cpu_moe == 0 and forced.n_gpu_layers == 49 and not forced.fits
    some = plan(MOE, [cuda(0, 12), cpu(64)], opts(num_ctx=8192, num_gpu=20))
    assert some.n_cpu_moe == 0 and some.n_gpu_layers == 20 and some.fits


def test_context_steps_down_before_experts_leave_the_gpu() -> None:
    # A 24 GiB card starts at 32768 tokens; with 16 GiB free nothing fits fully at any
    # context, so the smallest one is kept and experts go to RAM.
    p = plan(MOE, [cuda(0, 24, 16), cpu(64)], opts())
    assert p.n_ctx == 4096 and p.ctx_reduced and p.n_cpu_moe > 0 and p.fully_offloaded
    assert "in RAM (MoE)" in p.reason and p.reason.endswith("context reduced to 4096 to fit")


@pytest.mark.parametrize("name", sorted(ALL_SHAPES))
def test_dense_models_never_move_experts(name: str) -> None:
    p = plan(ALL_SHAPES[name], [cuda(0, 4), cpu(200)], opts(num_ctx=4096))
    assert p.n_cpu_moe == 0 and p.apply(LoadOptions()).n_cpu_moe == 0
