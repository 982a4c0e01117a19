"""The planner counts the repacked weight copies of the CPU backend (AMX, CPU_REPACK)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

from localllm.gguf.info import Matrix, ModelInfo, read_model_info
from localllm.hardware.cpu_buffers import BufferRule, ExtraBuffer
from localllm.hardware.detect import Device
from localllm.scheduler.planner import PlanOptions, plan
from localllm.scheduler.repack import describe, repacked_bytes
from tests.support import ggufmeta
from tests.support.shapes import cpu, cuda, rpc

# What ggml reported on a Xeon with AMX (engine/cpu_buffers.py, 4096 x 4096 weights):
# AMX stores Q4_K with 4 extra bytes per block, Q6_K as it is.
AMX = ExtraBuffer(
    "AMX",
    (
        BufferRule(Q.F16, 2, 16, 32, 33554432, 33554432),
        BufferRule(Q.Q4_K, 2, 256, 32, 9699328, 9437184),
        BufferRule(Q.Q6_K, 2, 256, 32, 13762560, 13762560),
    ),
)
# CPU_REPACK on AVX2: Q4_0 / Q4_K matrices and expert stacks, rows in groups of 8.
REPACK = ExtraBuffer(
    "CPU_REPACK",
    (
        BufferRule(Q.Q4_0, 2, 32, 8, 1, 1),
        BufferRule(Q.Q4_K, 2, 256, 8, 1, 1),
        BufferRule(Q.Q4_K, 3, 256, 8, 1, 1),
    ),
)
Q4K_AMX = 9699328 / 9437184
OPTS = PlanOptions(num_ctx=1024, num_gpu=0)


@pytest.fixture(scope="module")
def info(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    # Q4_K_M: Q4_K for most matrices, Q6_K for attn_v, ffn_down and the output (last in the file).
    shape = ggufmeta.Shape(n_layers=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1024)
    path = tmp_path_factory.mktemp("q4km") / "m.gguf"
    return read_model_info(ggufmeta.write_gguf(Path(path), shape, "Q4_K_M"))


def host(*extra: ExtraBuffer) -> Device:
    return replace(cpu(), extra_buffers=extra)


def weights(info: ModelInfo, devices: list[Device], opts: PlanOptions = OPTS) -> int:
    return plan(info, devices, opts).cpu.weights


def layer_bytes(info: ModelInfo, t: int, below: int = 1 << 30) -> int:
    return sum(m.nbytes for m in info.matrices if m.ggml_type == t and 0 <= m.layer < below)


def output(info: ModelInfo) -> Matrix:
    return next(m for m in info.matrices if m.layer == -1)


def test_the_header_gives_every_matrix_and_where_it_lies(info: ModelInfo) -> None:
    assert len(info.matrices) == 4 * 7 + 1
    assert all(m.inner for m in info.matrices if m.layer >= 0)  # between the layers' norms
    out = output(info)
    assert (out.ggml_type, out.k, out.rows, out.inner) == (Q.Q6_K, 256, 1024, False)
    assert sum(m.nbytes for m in info.matrices) == sum(info.layer_bytes) + out.nbytes - 4 * 2 * 1024


def test_without_extra_buffer_types_nothing_is_added(info: ModelInfo) -> None:
    base = info.token_embd_bytes + sum(info.layer_bytes) + info.output_bytes + info.other_bytes
    assert weights(info, [cpu()]) == base
    assert weights(info, [host()]) == base


def test_repack_only_adds_a_copy_of_each_q4_k_matrix(info: ModelInfo) -> None:
    # The originals stay mapped (each layer's norms keep the file span over them).
    assert weights(info, [host(REPACK)]) == weights(info, [cpu()]) + layer_bytes(info, Q.Q4_K)


def test_amx_takes_q6_k_too_and_the_unmapped_output_costs_only_its_copy(info: ModelInfo) -> None:
    got = weights(info, [host(AMX)]) - weights(info, [cpu()])
    # The output matrix lies past the last vector: llama.cpp unmaps it after the load,
    # so its copy replaces it (Q6_K keeps its size in AMX).
    assert got == pytest.approx(
        layer_bytes(info, Q.Q4_K) * Q4K_AMX + layer_bytes(info, Q.Q6_K), abs=64
    )


def test_the_first_buffer_type_that_takes_a_matrix_wins(info: ModelInfo) -> None:
    assert weights(info, [host(AMX, REPACK)]) == weights(info, [host(AMX)])
    got = weights(info, [host(REPACK, AMX)]) - weights(info, [host(AMX)])
    assert got == pytest.approx(-layer_bytes(info, Q.Q4_K) * (Q4K_AMX - 1), abs=64)


def test_rows_or_columns_that_do_not_divide_keep_a_matrix_out(info: ModelInfo) -> None:
    odd = ExtraBuffer(
        "X", (BufferRule(Q.Q4_K, 2, 256, 3072, 1, 1), BufferRule(Q.Q6_K, 2, 1024, 8, 1, 1))
    )
    assert weights(info, [host(odd)]) == weights(info, [cpu()])


def test_a_gpu_with_a_host_buffer_comes_first_even_with_no_layers(info: ModelInfo) -> None:
    # llama.cpp's CPU list starts with the host buffer of the model's first GPU that has
    # one; under mmap those weights then stay in the mapped file.  A plan with no GPU
    # still hands the runner's local GPUs to llama.cpp.
    gpu = replace(cuda(0, 24), host_buffer=True)
    assert weights(info, [host(AMX), gpu]) == weights(info, [cpu(), gpu])
    partial = replace(OPTS, num_gpu=2)
    assert weights(info, [host(AMX), gpu], partial) == weights(info, [cpu(), gpu], partial)


def test_cpu_repack_off_counts_no_copy(info: ModelInfo) -> None:
    # LOCALLLM_CPU_REPACK=off: the runner loads with use_extra_bufts false.
    off = replace(OPTS, cpu_repack="off")
    assert weights(info, [host(AMX, REPACK)], off) == weights(info, [cpu()])
    assert weights(info, [host(AMX, REPACK)], replace(off, use_mmap=False)) == weights(
        info, [cpu()], replace(OPTS, use_mmap=False)
    )
    draft = replace(off, draft=info)
    assert weights(info, [host(REPACK)], draft) == weights(info, [cpu()], draft)


def test_auto_counts_only_the_types_the_self_test_kept(info: ModelInfo) -> None:
    # A broken AMX (engine/cpu_check.py) is left out: CPU_REPACK takes its Q4_K matrices.
    broken = replace(AMX, auto=False, fault="self-test crashed: signal 4, SIGILL")
    assert weights(info, [host(broken, REPACK)]) == weights(info, [host(REPACK)])
    assert weights(info, [host(broken, REPACK)], replace(OPTS, cpu_repack="on")) == weights(
        info, [host(AMX, REPACK)]
    )
    # Where ggml's list cannot lose one type, auto keeps none (the probe says so).
    none = host(broken, replace(REPACK, auto=False))
    assert weights(info, [none]) == weights(info, [cpu()])


def test_doctor_says_what_each_mode_does_here() -> None:
    broken = replace(AMX, auto=False, fault="self-test crashed: signal 4, SIGILL")
    cpu_dev = host(broken, REPACK)
    assert describe("auto", cpu_dev) == (
        "auto: CPU_REPACK used; AMX left out (self-test crashed: signal 4, SIGILL)"
    )
    assert describe("on", cpu_dev) == "on: AMX, CPU_REPACK used (not tested)"
    assert describe("off", cpu_dev) == (
        "off: weights stay as the file has them (AMX, CPU_REPACK unused)"
    )
    assert describe("auto", host()) == "auto: this CPU backend has no extra buffer types"
    assert describe("auto", host(broken, replace(REPACK, auto=False))) == (
        "auto: none used; AMX left out (self-test crashed: signal 4, SIGILL); "
        "CPU_REPACK left out (works, but only all types can be left out here)"
    )


def test_over_rpc_the_cpu_layers_are_repacked(info: ModelInfo) -> None:
    # An RPC device has no host buffer: the two layers left on the CPU get their copies.
    devices = [host(REPACK), rpc("gpu-box:50052", 24)]
    p = plan(info, devices, replace(OPTS, num_gpu=2))
    assert p.n_gpu_layers == 2
    base = plan(info, [cpu(), rpc("gpu-box:50052", 24)], replace(OPTS, num_gpu=2))
    assert p.cpu.weights == base.cpu.weights + layer_bytes(info, Q.Q4_K, below=2)


def test_without_mmap_only_the_copies_are_held(info: ModelInfo) -> None:
    opts = replace(OPTS, use_mmap=False)
    assert weights(info, [host(REPACK)], opts) == weights(info, [cpu()], opts)
    assert weights(info, [host(AMX)], opts) - weights(info, [cpu()], opts) == pytest.approx(
        layer_bytes(info, Q.Q4_K) * (Q4K_AMX - 1), abs=64
    )


def test_a_draft_model_in_ram_is_repacked_too(info: ModelInfo) -> None:
    opts = replace(OPTS, draft=info)
    grown = weights(info, [host(REPACK)], opts) - weights(info, [cpu()], opts)
    assert grown == 2 * layer_bytes(info, Q.Q4_K)


def test_experts_left_in_ram_are_copied_and_their_originals_unmapped() -> None:
    # Layer 0 on the CPU; the experts of layers 1 and 2 in RAM beside offloaded layers.
    stack = [Matrix(i, Q.Q4_K, True, 256, 512, 1000, True) for i in range(4)]
    info = replace(ggufmeta.model_info_for(ggufmeta.Shape(), "F32"), matrices=tuple(stack))
    assert repacked_bytes(info, [REPACK], cpu_layers=1, n_cpu_moe=3) == 1000
    assert repacked_bytes(info, [AMX], cpu_layers=1, n_cpu_moe=3) == 0  # AMX: no MUL_MAT_ID
    assert repacked_bytes(info, [REPACK], cpu_layers=1, n_cpu_moe=3, use_mmap=False) == 0


def test_tied_embeddings_copy_the_output_once() -> None:
    # The output reuses token_embd's pages: the planner already counts them twice, so
    # a repacked output costs its copy in place of the second count.
    shape = ggufmeta.Shape(n_layers=2, n_embd=256, n_ff=512, n_vocab=1024, tied_output=True)
    info = ggufmeta.model_info_for(shape, "Q4_K_S")
    out = output(info)
    assert (out.ggml_type, out.inner) == (Q.Q4_K, False)
    assert out.nbytes == info.token_embd_bytes
    got = weights(info, [host(AMX)]) - weights(info, [cpu()])
    assert got == pytest.approx(
        (layer_bytes(info, Q.Q4_K) + out.nbytes) * Q4K_AMX - out.nbytes, abs=64
    )
