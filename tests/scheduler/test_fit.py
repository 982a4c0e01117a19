"""The fit verdict (scheduler/fit.py): the planner's placement as gpu / partial / cpu / too big."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from localllm.gguf.info import read_model_info
from localllm.gguf.reader import read_header
from localllm.scheduler.estimate import CTX_PAD
from localllm.scheduler.fit import assess, describe, reclaimed, scaled
from localllm.scheduler.planner import PlanOptions, plan
from tests.support.shapes import LLAMA31_8B, LLAMA31_70B, QWEN2_05B, cpu, cuda, model_info

GiB = 1 << 30
OPTS = PlanOptions()
LLAMA8 = model_info(LLAMA31_8B, "Q4_K_M")  # 4.9 GB of weights, 131072 training context


def test_a_model_that_fits_a_gpu_has_every_layer_on_it() -> None:
    fit = assess(LLAMA8, [cuda(0, 24), cpu(64)], OPTS)
    assert fit.status == "gpu"
    assert fit.summary == "all 33 layers on GPU" and fit.layers_on_gpu == fit.layers == 33
    assert set(fit.memory) == {"CUDA0", "CPU"}
    assert fit.memory["CUDA0"] > LLAMA8.file_size - LLAMA8.token_embd_bytes
    assert fit.context == 32768  # the automatic context of 24 GiB of VRAM


def test_a_small_gpu_takes_some_layers_and_says_how_many() -> None:
    fit = assess(LLAMA8, [cuda(0, 4), cpu(64)], OPTS)
    assert fit.status == "partial"
    assert fit.summary == f"{fit.layers_on_gpu}/33 layers on GPU"
    assert 0 < fit.layers_on_gpu < 33
    assert fit.memory["CPU"] > 0 and fit.memory["CUDA0"] > 2 * GiB


def test_without_a_gpu_it_is_cpu_only() -> None:
    fit = assess(LLAMA8, [cpu(32)], OPTS)
    assert (fit.status, fit.summary, fit.layers_on_gpu) == ("cpu", "CPU only", 0)
    assert list(fit.memory) == ["CPU"]
    assert describe(fit).startswith("CPU only, ")


def test_a_model_larger_than_ram_and_vram_together_is_too_big() -> None:
    fit = assess(model_info(LLAMA31_70B, "Q4_K_M"), [cuda(0, 8), cpu(16)], OPTS)
    assert fit.status == "too_big" and fit.summary == "too big"
    assert fit.max_context == 0
    assert "RAM" in describe(fit)


def test_the_largest_context_is_the_last_that_still_fits() -> None:
    devices = [cuda(0, 12), cpu(64)]
    fit = assess(LLAMA8, devices, OPTS)
    assert fit.status == "gpu" and fit.context < fit.max_context < LLAMA8.context_length
    assert fit.max_context % CTX_PAD == 0
    at = plan(LLAMA8, devices, replace(OPTS, num_ctx=fit.max_context))
    past = plan(LLAMA8, devices, replace(OPTS, num_ctx=fit.max_context + CTX_PAD))
    assert at.fits and at.fully_offloaded
    assert not (past.fits and past.fully_offloaded)


def test_the_largest_context_stops_at_the_training_context() -> None:
    small = model_info(QWEN2_05B, "Q8_0")  # 32768 tokens of training context
    fit = assess(small, [cuda(0, 80), cpu(64)], OPTS)
    assert fit.max_context == small.context_length


def test_memory_loaded_models_hold_counts_as_free() -> None:
    devices = [cuda(0, 24, free_gib=3), cpu(8, total_gib=64)]
    loaded = plan(LLAMA8, [cuda(0, 24), cpu(64)], OPTS)
    back = reclaimed(devices, [loaded])
    assert back[0].free == 3 * GiB + loaded.gpus[0].total
    assert back[1].free == 8 * GiB + loaded.host_bytes
    assert assess(LLAMA8, back, OPTS).status == "gpu"
    assert assess(LLAMA8, devices, OPTS).status == "partial"
    # Never more than the device has.
    assert reclaimed([cuda(0, 24, free_gib=23.5)], [loaded])[0].free == 24 * GiB


@pytest.mark.parametrize(("read", "other"), [("Q8_0", "Q4_K_M"), ("Q4_K_M", "F16")])
def test_another_quant_scaled_by_file_size_is_close_to_its_own_header(
    tmp_path: Path, read: str, other: str
) -> None:
    from tests.support.ggufmeta import SHAPES, write_gguf

    a = write_gguf(tmp_path / f"a-{read}.gguf", SHAPES["1b"], read)
    b = write_gguf(tmp_path / f"b-{other}.gguf", SHAPES["1b"], other)
    info_a, info_b = read_model_info(a), read_model_info(b)
    data_a = sum(t[2] for t in read_header(a).tensors)
    guess = scaled(info_a, b.stat().st_size, data_a)
    assert guess.file_size == info_b.file_size
    weights = sum(guess.layer_bytes) + guess.output_bytes + guess.token_embd_bytes
    real = sum(info_b.layer_bytes) + info_b.output_bytes + info_b.token_embd_bytes
    assert abs(weights - real) / real < 0.08
    devices = [cpu(64)]
    est, exact = assess(guess, devices, OPTS), assess(info_b, devices, OPTS)
    assert abs(est.total - exact.total) / exact.total < 0.08
