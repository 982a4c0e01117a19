"""The planner against real files: GGUF headers read back, and what llama.cpp allocates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from localllm.gguf.info import ModelInfo, read_model_info
from localllm.hardware.detect import Device
from localllm.scheduler.planner import PlanOptions, plan
from tests.support import shapes
from tests.support.randmodel import LlamaShape, write_llama
from tests.support.shapes import cpu, cuda

MiB = 1024 * 1024
FIELDS = (
    "architecture",
    "n_layers",
    "n_embd",
    "n_head",
    "n_head_kv",
    "head_dim_k",
    "head_dim_v",
    "context_length",
    "n_vocab",
    "layer_bytes",
    "output_bytes",
    "token_embd_bytes",
)


def _written(s: shapes.Shape, quant: str, tmp_path: Path) -> ModelInfo:
    from tests.support import ggufmeta

    meta = ggufmeta.Shape(
        s.arch,
        s.name,
        s.n_layers,
        s.n_embd,
        s.n_head,
        s.n_head_kv,
        s.n_ff,
        s.n_vocab,
        s.n_ctx_train,
        tied_output=s.tied,
        attn_bias=s.qkv_bias,
    )
    return read_model_info(ggufmeta.write_gguf(tmp_path / "m.gguf", meta, quant))


@pytest.mark.parametrize(
    ("shape", "quant"),
    [
        (shapes.QWEN2_05B, "Q8_0"),
        (shapes.LLAMA32_1B, "Q8_0"),
        (shapes.LLAMA2_7B, "Q4_K_M"),
        (shapes.LLAMA31_8B, "Q4_K_M"),
        (shapes.LLAMA31_70B, "Q4_K_M"),
    ],
)
def test_headers_read_back_into_the_same_shapes(
    shape: shapes.Shape, quant: str, tmp_path: Path
) -> None:
    expected = shapes.model_info(shape, quant)
    got = _written(shape, quant, tmp_path)
    for name in FIELDS:
        assert getattr(got, name) == getattr(expected, name), name
    devices = [cuda(0, 8), cpu()]
    assert plan(got, devices, PlanOptions()) == plan(expected, devices, PlanOptions())


def _allocated(path: Path, ctx: int, parallel: int, fa: str) -> dict[str, dict[str, int]]:
    from localllm.engine.engine import Engine
    from localllm.runner.messages import LoadOptions

    opts = LoadOptions(
        n_ctx=ctx,
        n_parallel=parallel,
        n_gpu_layers=0,
        flash_attn=fa,  # type: ignore[arg-type]
        n_threads=1,
    )
    with Engine([str(path)], opts) as engine:
        return engine.memory_report()


def _devices() -> list[Device]:
    """This machine's devices as the daemon's probe reports them (the CPU's extra buffer
    types, which GPUs have a host buffer), with 16 GiB of RAM so nothing is squeezed."""
    from localllm.engine.probe_child import collect
    from localllm.hardware.cpu import cpu_info
    from localllm.hardware.detect import build_hardware

    hw = build_hardware(collect(), cpu_info(), [])
    return [replace(d, free=16 << 30, total=16 << 30) if d.kind == "cpu" else d for d in hw.devices]


@pytest.fixture(scope="module")
def llama_58m(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A ~58M-parameter llama (8 layers, 512 wide, 32000 vocabulary) in F16.
    return write_llama(
        tmp_path_factory.mktemp("m") / "llama58m.gguf", LlamaShape(n_ctx_train=16384)
    )


@pytest.mark.parametrize(
    ("ctx", "parallel", "fa"), [(2048, 1, "on"), (8192, 1, "off"), (1024, 4, "on"), (1000, 3, "on")]
)
def test_cpu_estimate_within_15_percent_of_llama_cpp(
    llama_58m: Path, ctx: int, parallel: int, fa: str
) -> None:
    report = _allocated(llama_58m, ctx, parallel, fa)
    # What llama.cpp allocated; the idle slots' prompt cache (engine/park.py) is a budget
    # that fills as slots are parked, not planned for.
    actual = sum(v for parts in report.values() for k, v in parts.items() if k != "cache")
    info = read_model_info(llama_58m)
    p = plan(
        info,
        _devices(),
        PlanOptions(num_ctx=ctx, num_parallel=parallel, flash_attention=fa, num_gpu=0),
    )
    assert p.n_ctx == ctx and p.n_gpu_layers == 0
    assert abs(p.ram - actual) / actual < 0.15, (p.cpu, report)
    # The KV cache is exact (llama.cpp logs MiB with two decimals).
    assert abs(p.cpu.kv - report["CPU"]["kv"]) <= MiB // 100


@pytest.mark.parametrize("mode", ["auto", "off"])
@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0", "Q4_K_M", "F16"])
def test_cpu_weights_as_llama_cpp_maps_and_repacks_them(
    quant: str, mode: str, tmp_path: Path
) -> None:
    # Weights only, so the comparison is tight: the mapped file span plus the copies this
    # CPU's extra buffer types (AMX, CPU_REPACK...) take, if it has any, and
    # LOCALLLM_CPU_REPACK lets them (auto: those whose self-test passed; off: none).
    from localllm.engine.engine import Engine
    from localllm.engine.model import buffer_sizes
    from localllm.runner.messages import LoadOptions
    from tests.support import ggufmeta

    shape = ggufmeta.Shape(n_layers=3, n_embd=512, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=4096)
    path = ggufmeta.write_gguf(tmp_path / "m.gguf", shape, quant)
    load = LoadOptions(n_ctx=512, n_gpu_layers=0, n_threads=1, cpu_repack=mode)  # type: ignore[arg-type]
    with Engine([str(path)], load) as engine:
        logged = buffer_sizes(engine._load_log, ram=())  # each buffer type on its own
    p = plan(read_model_info(path), _devices(), PlanOptions.from_load(load))
    model = sum(v["model"] for v in logged.values())
    if mode == "off":
        assert set(logged) <= {"CPU", "CPU_Mapped"}, logged
    # llama.cpp logs each buffer in MiB with two decimals.
    assert abs(p.cpu.weights - model) <= len(logged) * MiB // 100, logged
