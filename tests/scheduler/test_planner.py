"""The load planner on synthetic devices × real model shapes."""

from __future__ import annotations

import dataclasses

import pytest

from localllm.hardware.detect import Device
from localllm.scheduler.estimate import (
    MiB,
    estimate_kv_bytes,
    fmt_bytes,
    graph_bytes,
    kv_cells,
)
from localllm.scheduler.planner import (
    MIN_RESERVE,
    LoadPlan,
    PlanOptions,
    fits_alongside,
    plan,
    subtract_loaded,
)
from tests.support.shapes import (
    ALL_SHAPES,
    LLAMA31_8B,
    GiB,
    cpu,
    cuda,
    gpu,
    igpu,
    metal,
    model_info,
    rpc,
)

L8B = ALL_SHAPES["llama3.1-8b"]
L70B = ALL_SHAPES["llama3.1-70b"]
Q05B = ALL_SHAPES["qwen2-0.5b"]
L1B = ALL_SHAPES["llama3.2-1b"]
L7B = ALL_SHAPES["llama2-7b"]


def opts(**kw: object) -> PlanOptions:
    return PlanOptions(**kw)  # type: ignore[arg-type]


# -- the estimate ---------------------------------------------------------------
def test_worked_example_llama31_8b_f16_8192_is_1_gib() -> None:
    assert estimate_kv_bytes(L8B, 8192, 1, "f16", pad=False) == 1 * GiB
    assert estimate_kv_bytes(L8B, 8192, 1, "f16") == 1 * GiB  # already a multiple of 256


def test_quantized_kv_uses_ggml_block_sizes() -> None:
    f16 = estimate_kv_bytes(L8B, 8192, 1, "f16")
    assert estimate_kv_bytes(L8B, 8192, 1, "q8_0") == f16 // 2 * 34 // 32
    assert estimate_kv_bytes(L8B, 8192, 1, "q4_0") == f16 // 2 * 18 // 32
    assert estimate_kv_bytes(L8B, 8192, 1, "f32") == 2 * f16


def test_kv_scales_with_parallel_and_pads_context_like_llama_cpp() -> None:
    assert kv_cells(1000) == 1024
    assert kv_cells(4096, 4) == 16384
    # One unified cache: the total is padded, not each slot (the engine asks for
    # max(n_ctx, 8) * n_parallel cells).
    assert kv_cells(1000, 4) == 4096
    assert kv_cells(100, 4) == 512
    assert kv_cells(1, 3) == 256
    assert estimate_kv_bytes(L8B, 4096, 4) == estimate_kv_bytes(L8B, 16384, 1)
    assert estimate_kv_bytes(L8B, 1000, 1) == estimate_kv_bytes(L8B, 1024, 1)


def test_shapes_match_real_file_sizes() -> None:
    # Published GGUF sizes: qwen2 0.5B Q8_0 531 MB, Llama-3.2-1B Q8_0 1.32 GB,
    # Llama-2-7B Q4_0 3.83 GB, Llama-3.1-8B Q4_K_M 4.92 GB, 70B Q4_K_M 42.5 GB.
    for info, real in (
        (Q05B, 0.531e9),
        (L1B, 1.32e9),
        (L7B, 3.83e9),
        (L8B, 4.92e9),
        (L70B, 42.5e9),
    ):
        assert abs(info.file_size - real) / real < 0.07, info.name


def test_graph_without_flash_attention_grows_with_context() -> None:
    kv = estimate_kv_bytes(L8B, 32768)
    full_fa, _ = graph_bytes(L8B, 32768, 1, 512, True, kv)
    full_nofa, _ = graph_bytes(L8B, 32768, 1, 512, False, kv)
    assert full_nofa > 4 * full_fa
    # An architecture without a formula still gets a reserve.
    odd = dataclasses.replace(L8B, architecture="mamba-ish")
    assert graph_bytes(odd, 4096, 1, 512, True, kv)[1] > 0


# -- placement -------------------------------------------------------------------
def test_small_model_fully_offloaded_with_reason() -> None:
    p = plan(Q05B, [cuda(0, 6), cpu()], opts(num_ctx=4096))
    assert p.n_gpu_layers == 25 == p.n_layers and p.fully_offloaded and p.fits
    assert p.reason.startswith("all 25 layers on CUDA0 (")
    assert p.gpus[0].weights == sum(Q05B.layer_bytes) + Q05B.output_bytes
    assert p.cpu.weights == Q05B.token_embd_bytes  # input embedding stays on the CPU


def test_8b_on_6_gib_is_partial_and_says_why() -> None:
    p = plan(L8B, [cuda(0, 6), cpu()], opts(num_ctx=8192))
    assert 0 < p.n_gpu_layers < 33 and p.fits
    assert p.reason.startswith(f"{p.n_gpu_layers}/33 layers on CUDA0, rest on CPU")
    assert "KV cache for 8192 tokens needs 1.0 GiB" in p.reason
    # Never promise more than the card has.
    assert p.gpus[0].total + MIN_RESERVE <= cuda(0, 6).free


def test_8b_on_8_gib_fits_with_8192_context() -> None:
    p = plan(L8B, [cuda(0, 8), cpu()], opts(num_ctx=8192))
    assert p.n_gpu_layers == 33 and p.n_ctx == 8192
    assert p.gpus[0].kv == 1 * GiB


@pytest.mark.parametrize("name", sorted(ALL_SHAPES))
@pytest.mark.parametrize("num_ctx", [0, 8192])
def test_more_vram_never_means_fewer_layers(name: str, num_ctx: int) -> None:
    info = ALL_SHAPES[name]
    last = -1
    for tenths in range(5, 1000, 7):
        gib = tenths / 10
        p = plan(info, [cuda(0, gib), cpu(200)], opts(num_ctx=num_ctx))
        assert p.n_gpu_layers >= last, (name, gib)
        last = p.n_gpu_layers
    assert last == info.n_layers + 1  # eventually everything


def test_output_layer_is_placed_last() -> None:
    seen_all_but_output = False
    for tenths in range(40, 80):
        p = plan(L8B, [cuda(0, tenths / 10), cpu()], opts(num_ctx=8192))
        n = p.n_gpu_layers
        if n <= L8B.n_layers:  # the output layer stays on the CPU
            assert p.gpus[0].weights == sum(L8B.layer_bytes[L8B.n_layers - n :]) if n else True
            assert p.cpu.weights >= L8B.output_bytes
            seen_all_but_output = seen_all_but_output or n == L8B.n_layers
        else:
            assert p.gpus[0].weights == sum(L8B.layer_bytes) + L8B.output_bytes
    assert seen_all_but_output


def test_num_gpu_override() -> None:
    p = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=4096, num_gpu=10))
    assert p.n_gpu_layers == 10 and p.fits and p.reason.startswith("num_gpu=10: 10/33")
    assert p.gpus[0].weights == sum(L8B.layer_bytes[-10:])  # the top ten, no output
    cpu_only = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=4096, num_gpu=0))
    assert cpu_only.n_gpu_layers == 0 and not cpu_only.gpus
    assert cpu_only.reason.startswith("CPU only: num_gpu=0")
    forced = plan(L70B, [cuda(0, 6), cpu(200)], opts(num_ctx=4096, num_gpu=999))
    assert forced.n_gpu_layers == 81 and not forced.fits
    assert "does not fit: estimate exceeds free memory on CUDA0 by" in forced.reason


def test_two_gpus_split_a_70b_and_one_gpu_suffices_for_an_8b() -> None:
    p = plan(L70B, [cuda(0, 32), cuda(1, 32), cpu(200)], opts(num_ctx=8192))
    assert p.fully_offloaded and len(p.gpus) == 2 and sum(p.tensor_split) == 81
    assert {g.name for g in p.gpus} == {"CUDA0", "CUDA1"}
    small = plan(L8B, [cuda(0, 24), cuda(1, 24), cpu()], opts(num_ctx=8192))
    assert small.fully_offloaded and len(small.gpus) == 1
    # Two 24 GiB cards hold a 70B that one of them cannot.
    one = plan(L70B, [cuda(0, 24), cpu(200)], opts(num_ctx=4096))
    two = plan(L70B, [cuda(0, 24), cuda(1, 24), cpu(200)], opts(num_ctx=4096))
    assert not one.fully_offloaded and two.fully_offloaded


def test_the_device_with_the_top_layers_takes_the_output_layer() -> None:
    p = plan(L70B, [cuda(0, 48), cuda(1, 32), cpu(200)], opts(num_ctx=4096))
    assert p.fully_offloaded
    last = p.gpus[-1]  # llama.cpp order: the last device takes the top layers
    assert last.weights == sum(L70B.layer_bytes[-(last.layers - 1) :]) + L70B.output_bytes


def _follows_free_memory(p: LoadPlan, devs: list[Device]) -> None:
    """Each GPU's share of the plan's bytes is its share of free memory."""
    for g, d in zip(p.gpus, devs, strict=True):
        assert abs(g.total / p.vram - d.free / sum(x.free for x in devs)) < 0.04, p.tensor_split


@pytest.mark.parametrize("frees", [(32, 32), (40, 20), (16, 16, 16, 16), (30, 12, 12)])
def test_layers_split_over_gpus_by_free_memory(frees: tuple[int, ...]) -> None:
    devs = [cuda(i, f) for i, f in enumerate(frees)]
    p = plan(L70B, [*devs, cpu(200)], opts(num_ctx=8192))
    assert p.fully_offloaded and p.fits and len(p.gpus) == len(frees)
    assert [g.name for g in p.gpus] == [d.name for d in devs]  # llama.cpp's device order
    _follows_free_memory(p, devs)
    split = "/".join(str(n) for n in p.tensor_split)
    assert p.reason.startswith(
        f"all 81 layers on {', '.join(d.name for d in devs)} (split {split} by free memory; "
    )
    fewer = plan(L70B, [*devs[:-1], cpu(200)], opts(num_ctx=8192))
    assert not fewer.fully_offloaded  # none of them was needless


def test_placement_fills_load_options() -> None:
    from localllm.runner.messages import LoadOptions

    two = plan(L70B, [cuda(0, 40), cuda(1, 20), cpu(200)], opts(num_ctx=8192))
    load = two.apply(LoadOptions(n_gpu_layers=-1, main_gpu=3))
    assert (load.devices, load.split_mode, load.main_gpu) == (["CUDA0", "CUDA1"], "layer", 0)
    assert load.tensor_split == [float(n) for n in two.tensor_split]
    assert sum(load.tensor_split) == load.n_gpu_layers == 81 and load.n_cpu_moe == 0
    one = plan(L8B, [cuda(0, 24), cuda(1, 24), cpu()], opts(num_ctx=8192)).apply(LoadOptions())
    assert (one.devices, one.split_mode, one.main_gpu, one.tensor_split) == (
        ["CUDA0"],
        "none",
        0,
        [33.0],
    )
    cpu_only = plan(L8B, [cuda(0, 24), cpu()], opts(num_gpu=0)).apply(LoadOptions())
    assert (cpu_only.devices, cpu_only.n_gpu_layers, cpu_only.tensor_split) == ([], 0, [])


def test_remote_devices_take_only_what_local_gpus_cannot() -> None:
    near, far = rpc("10.0.0.2:50052", 32), rpc("10.0.0.3:50052", 48)
    assert plan(L8B, [cuda(0, 24), near, cpu()], opts(num_ctx=8192)).gpus[0].name == "CUDA0"
    p = plan(L70B, [cuda(0, 24), near, far, cpu(200)], opts(num_ctx=8192))
    assert p.fully_offloaded and p.fits and len(p.gpus) == 2
    local, remote = p.gpus[-1], p.gpus[0]
    # The local GPU takes the top layers and the output, filled before the remote one.
    assert local.name == "CUDA0" and remote.name.startswith("RPC[")
    assert local.weights >= sum(L70B.layer_bytes[-(local.layers - 1) :]) + L70B.output_bytes
    assert local.total + MIN_RESERVE + local.weights // local.layers > cuda(0, 24).free
    assert p.remote_bytes == remote.total
    assert p.reason.endswith(f"; {fmt_bytes(remote.total)} on remote (RPC) devices")
    assert not plan(L70B, [cuda(0, 24), cpu(200)], opts(num_ctx=8192)).fully_offloaded
    alone = plan(L70B, [far, cpu(200)], opts(num_ctx=8192))  # no local GPU at all
    assert alone.fully_offloaded and alone.gpus[0].name == "RPC[10.0.0.3:50052]"


def test_sched_spread_uses_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    devs = [cuda(0, 24), cuda(1, 24), cuda(2, 12), cpu()]
    monkeypatch.setenv("LOCALLLM_SCHED_SPREAD", "1")
    o = PlanOptions.from_config(num_ctx=8192)
    assert o.spread and not PlanOptions().spread
    p = plan(L8B, devs, o)
    assert [g.name for g in p.gpus] == ["CUDA0", "CUDA1", "CUDA2"] and p.fully_offloaded
    _follows_free_memory(p, devs[:3])
    assert p.reason.startswith("spread over 3 GPUs (LOCALLLM_SCHED_SPREAD): all 33 layers on ")
    # A forced num_gpu spreads those layers; without spread one GPU takes them.
    forced = plan(L8B, devs, opts(num_ctx=8192, num_gpu=10, spread=True))
    assert forced.n_gpu_layers == 10 and len(forced.gpus) == 3 and forced.fits
    assert forced.reason.startswith("num_gpu=10: spread over 3 GPUs")
    assert len(plan(L8B, devs, opts(num_ctx=8192, num_gpu=10)).gpus) == 1
    # Remote devices are GPUs too when spreading.
    far = plan(L8B, [cuda(0, 24), rpc("h:1", 24), cpu()], opts(num_ctx=8192, spread=True))
    assert [g.name for g in far.gpus] == ["RPC[h:1]", "CUDA0"]


# -- context ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gib", "ctx"), [(8, 4096), (16, 4096), (24, 32768), (40, 32768), (80, 131072)]
)
def test_default_context_follows_vram_tiers_clamped_to_training(gib: int, ctx: int) -> None:
    p = plan(L1B, [cuda(0, gib, gib), cpu()], opts())
    assert p.n_ctx == ctx and not p.ctx_reduced and p.fully_offloaded


def test_context_steps_down_until_the_model_fits() -> None:
    p = plan(L70B, [cuda(0, 48, 47), cpu(200)], opts())
    assert p.ctx_reduced and p.fully_offloaded and 4096 <= p.n_ctx < 131072
    assert f"context reduced to {p.n_ctx} to fit" in p.reason
    # The next rung up would not have fitted.
    bigger = plan(L70B, [cuda(0, 48, 47), cpu(200)], opts(num_ctx=p.n_ctx * 2))
    assert not bigger.fully_offloaded
    # Nothing fits fully: stop at 4096 and offload what fits.
    low = plan(L70B, [cuda(0, 24), cpu(200)], opts())
    assert low.n_ctx == 4096 and not low.fully_offloaded and low.n_gpu_layers > 0


def test_explicit_context_setting_is_used_and_clamped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "16384")
    o = PlanOptions.from_config(num_parallel=1)
    assert plan(L8B, [cuda(0, 8), cpu()], o).n_ctx == 16384
    assert plan(L7B, [cuda(0, 8), cpu()], o).n_ctx == 4096  # Llama-2 trained on 4096
    assert plan(L8B, [cuda(0, 8), cpu()], opts(num_ctx=200000)).n_ctx == 131072


def test_quantized_kv_needs_flash_attention() -> None:
    on = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=8192, kv_type="q8_0"))
    off = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=8192, kv_type="q8_0", flash_attention="off"))
    assert on.kv_type == "q8_0" and on.kv_bytes == GiB // 2 * 34 // 32
    assert off.kv_type == "f16" and off.kv_bytes == GiB
    odd = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=8192, kv_type="nonsense"))
    assert odd.kv_type == "f16" and odd.kv_bytes == GiB
    upper = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=8192, kv_type="Q4_0"))
    assert upper.kv_type == "q4_0"


# -- Metal and CPU ---------------------------------------------------------------
def test_metal_shares_system_ram() -> None:
    roomy = plan(L8B, [metal(21), cpu(30)], opts(num_ctx=4096))
    assert roomy.fully_offloaded and roomy.fits and roomy.gpus[0].name == "Metal"
    # The GPU budget is the RAM that is actually available, not the Metal working set.
    partial = plan(L8B, [metal(21), cpu(6)], opts(num_ctx=4096))
    assert 0 < partial.n_gpu_layers < 33 and partial.fits
    assert partial.gpus[0].total + partial.ram <= 6 * GiB
    tight = plan(L8B, [metal(21), cpu(5)], opts(num_ctx=4096))
    assert not tight.fits and "does not fit: needs" in tight.reason


def test_metal_reserve_is_512_mib() -> None:
    need = plan(L1B, [metal(64), cpu(64)], opts(num_ctx=4096)).gpus[0]
    graph = need.graph
    exact = need.weights + need.kv + graph + 512 * MiB
    assert plan(L1B, [metal(64, exact / GiB), cpu(64)], opts(num_ctx=4096)).fully_offloaded
    short = (exact - 40 * MiB) / GiB
    assert not plan(L1B, [metal(64, short), cpu(64)], opts(num_ctx=4096)).fully_offloaded


def test_cuda_reserve_is_what_a_cuda_runner_was_measured_to_hold() -> None:
    # 603 MiB beyond llama.cpp's buffers on an H100 (bench/gpu_check.sh): a plan that
    # kept only the generic 457 MiB would fill a CUDA GPU past what fits.
    def least_free_mib(library: str) -> int:
        lo, hi = 0, 64 * 1024
        while hi - lo > 1:
            mid = (lo + hi) // 2
            dev = gpu(f"{library}0", library, 64, mid / 1024)
            if plan(L1B, [dev, cpu(64)], opts(num_ctx=4096)).fully_offloaded:
                hi = mid
            else:
                lo = mid
        return hi

    assert least_free_mib("CUDA") - least_free_mib("Vulkan") == 640 - 457


def test_cpu_only() -> None:
    p = plan(L8B, [cpu(32)], opts(num_ctx=4096))
    assert p.n_gpu_layers == 0 and p.fits and not p.gpus
    assert p.reason.startswith("CPU only: no GPU the engine can use")
    assert p.ram >= L8B.file_size + estimate_kv_bytes(L8B, 4096)
    short = plan(L8B, [cpu(4)], opts(num_ctx=4096))
    assert not short.fits
    assert f"does not fit: needs {fmt_bytes(short.ram)} of RAM, 4.0 GiB available" in short.reason


def test_metal_memory_is_counted_once() -> None:
    p = plan(L8B, [metal(21), cpu(6.5)], opts(num_ctx=4096))
    assert p.fully_offloaded and p.fits and p.gpus[0].unified
    # The GPU's bytes are RAM: counted with the CPU side once, not on top of it again.
    assert p.host_bytes == p.ram + p.vram <= 6.5 * GiB < p.ram + 2 * p.vram
    # The GPU's room is the RAM left after the host side.
    assert p.gpus[0].free == int(6.5 * GiB) - (p.cpu.weights + p.cpu.graph)
    full_ram = cpu(64, 64)
    left = subtract_loaded([metal(21), full_ram], [p])
    assert left[0].free == metal(21).free - p.vram
    assert left[1].free == full_ram.free - p.host_bytes
    _, second = fits_alongside(
        L8B, [metal(21), cpu(30)], opts(num_ctx=4096, available_ram=12 * GiB), [p]
    )
    assert second.cpu.free == 12 * GiB - p.host_bytes


def test_integrated_gpu_only_used_without_a_discrete_one() -> None:
    assert plan(L1B, [igpu(8), cuda(1, 8), cpu()], opts(num_ctx=4096)).gpus[0].name == "CUDA1"
    p = plan(L1B, [igpu(8), cpu()], opts(num_ctx=4096))
    assert p.gpus[0].name == "Vulkan0" and p.gpus[0].unified and p.fully_offloaded
    # Its memory is RAM: 8 GiB of "free" GPU memory does not help with 3 GiB of RAM.
    short = plan(L8B, [igpu(8), cpu(3)], opts(num_ctx=4096))
    assert 0 < short.vram <= 3 * GiB and not short.fits


def test_gpu_overhead_is_kept_free() -> None:
    base = plan(L8B, [cuda(0, 6), cpu()], opts(num_ctx=4096))
    less = plan(L8B, [cuda(0, 6), cpu()], opts(num_ctx=4096, gpu_overhead=2 * GiB))
    assert less.n_gpu_layers < base.n_gpu_layers


# -- next to loaded models ---------------------------------------------------------
def test_fits_alongside_and_subtract_loaded() -> None:
    devs = [cuda(0, 24), cpu(32)]
    o = opts(num_ctx=8192)
    first = plan(L8B, devs, o)
    ok, second = fits_alongside(L8B, devs, o, [first])
    assert ok and second.fully_offloaded
    ok4, _ = fits_alongside(L8B, devs, o, [first, second, first])
    assert not ok4  # a fourth 8B does not fit next to three on 24 GiB
    left = subtract_loaded(devs, [first])
    assert left[0].free == min(devs[0].free, devs[0].total - first.vram)
    assert left[1].free == min(devs[1].free, devs[1].total - first.ram)
    assert not fits_alongside(L8B, [cuda(0, 8), cpu(32)], o, [first])[0]


def test_plan_applies_to_load_options() -> None:
    from localllm.runner.messages import LoadOptions

    p: LoadPlan = plan(L8B, [cuda(0, 8), cpu()], opts(num_ctx=0, kv_type="q8_0"))
    load = p.apply(LoadOptions(n_ctx=0, n_gpu_layers=-1))
    assert (load.n_ctx, load.n_gpu_layers, load.kv_type) == (p.n_ctx, 33, "q8_0")
    o = PlanOptions.from_load(LoadOptions(n_ctx=2048, n_parallel=2, n_gpu_layers=5))
    assert (o.num_ctx, o.num_parallel, o.num_gpu) == (2048, 2, 5)


def test_model_info_shape_helper_matches_hand_count() -> None:
    # Llama-3.1-8B layer at Q4_K_M: q,o 4096², k,v 4096x1024, ffn 3 x 4096x14336.
    info = model_info(LLAMA31_8B, "F16")
    per_layer = 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 4 * 4096
    assert info.layer_bytes[0] == per_layer


# -- slots (num_parallel) --------------------------------------------------------
def test_every_slot_gets_its_own_context_memory() -> None:
    one = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=4096, num_parallel=1))
    two = plan(L8B, [cuda(0, 24), cpu()], opts(num_ctx=4096, num_parallel=2))
    assert (one.n_parallel, two.n_parallel) == (1, 2)
    assert two.kv_bytes == 2 * one.kv_bytes == GiB  # 2 x 4096 cells x 128 KiB
    assert two.n_ctx == one.n_ctx == 4096  # n_ctx stays per slot
    assert two.vram > one.vram


def test_more_slots_step_an_automatic_context_down_further() -> None:
    devices = [cuda(0, 24, 23), cpu(64)]  # the 32768 tier
    one = plan(L8B, devices, opts(num_parallel=1))
    eight = plan(L8B, devices, opts(num_parallel=8))
    assert one.n_ctx == 32768 and not one.ctx_reduced
    assert one.fully_offloaded and eight.fully_offloaded
    assert eight.n_ctx < one.n_ctx and eight.ctx_reduced
    assert eight.kv_bytes == estimate_kv_bytes(L8B, eight.n_ctx, 8)


def test_slots_come_from_the_requested_load_options() -> None:
    from localllm.runner.messages import LoadOptions

    o = PlanOptions.from_load(LoadOptions(n_ctx=2048, n_parallel=3))
    assert (o.num_ctx, o.num_parallel) == (2048, 3)
    p = plan(Q05B, [cpu(16)], o)
    assert p.n_parallel == 3 and p.kv_bytes == estimate_kv_bytes(Q05B, 2048, 3)
    assert PlanOptions.from_load(LoadOptions(n_parallel=0)).num_parallel == 1
