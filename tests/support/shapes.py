"""Real model shapes as ``ModelInfo``, with tensor bytes computed from real shapes and quant types.

Metadata values (layers, heads, kv heads, embedding, FFN, vocabulary, training
context) are those published in each model's config / GGUF header; tensor
bytes use ggml's block sizes, so a Q4_K_M 8B comes out at the size of the
real file (4.92 GB).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from localllm.gguf.info import ModelInfo
from localllm.hardware.detect import Device, DeviceKind

Q = GGMLQuantizationType
GiB = 1024**3


@dataclass(frozen=True)
class Shape:
    arch: str
    name: str
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    tied: bool
    head_dim: int = 0
    qkv_bias: bool = False
    n_expert: int = 0  # MoE: experts per layer; n_ff is then one expert's FFN width


QWEN2_05B = Shape("qwen2", "Qwen2-0.5B", 24, 896, 14, 2, 4864, 151936, 32768, True, 64, True)
LLAMA32_1B = Shape("llama", "Llama-3.2-1B", 16, 2048, 32, 8, 8192, 128256, 131072, True, 64)
LLAMA31_8B = Shape("llama", "Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072, False, 128)
LLAMA2_7B = Shape("llama", "Llama-2-7B", 32, 4096, 32, 32, 11008, 32000, 4096, False, 128)
LLAMA31_70B = Shape("llama", "Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072, False, 128)
QWEN3_30B_A3B = Shape(
    "qwen3moe", "Qwen3-30B-A3B", 48, 2048, 32, 4, 768, 151936, 40960, False, 128, n_expert=128
)

# Per-tensor types of each quant mix (llama.cpp's choices, simplified to one type per role).
MIXES: dict[str, dict[str, Q]] = {
    "Q4_K_M": {
        "embd": Q.Q4_K,
        "out": Q.Q6_K,
        "attn": Q.Q4_K,
        "v": Q.Q6_K,
        "ffn": Q.Q4_K,
        "down": Q.Q6_K,
    },
    "Q8_0": {k: Q.Q8_0 for k in ("embd", "out", "attn", "v", "ffn", "down")},
    "Q4_0": {
        "embd": Q.Q4_0,
        "out": Q.Q6_K,
        "attn": Q.Q4_0,
        "v": Q.Q4_0,
        "ffn": Q.Q4_0,
        "down": Q.Q4_0,
    },
    "F16": {k: Q.F16 for k in ("embd", "out", "attn", "v", "ffn", "down")},
}


def nbytes(shape: tuple[int, ...], qtype: Q) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    assert shape[0] % block == 0, (shape, qtype)
    return n // block * size


def layer_tensors(s: Shape, mix: str) -> dict[str, tuple[tuple[int, ...], Q]]:
    """The blk.<i> tensors of one layer: name -> (ggml shape, type)."""
    m = MIXES[mix]
    d = s.head_dim or s.n_embd // s.n_head
    e, q, kv = s.n_embd, s.n_head * d, s.n_head_kv * d
    t = {
        "attn_norm.weight": ((e,), Q.F32),
        "attn_q.weight": ((e, q), m["attn"]),
        "attn_k.weight": ((e, kv), m["attn"]),
        "attn_v.weight": ((e, kv), m["v"]),
        "attn_output.weight": ((q, e), m["attn"]),
        "ffn_norm.weight": ((e,), Q.F32),
    }
    if s.n_expert:
        x = s.n_expert
        t |= {
            "ffn_gate_inp.weight": ((e, x), Q.F32),
            "ffn_gate_exps.weight": ((e, s.n_ff, x), m["ffn"]),
            "ffn_up_exps.weight": ((e, s.n_ff, x), m["ffn"]),
            "ffn_down_exps.weight": ((s.n_ff, e, x), m["down"]),
        }
    else:
        t |= {
            "ffn_gate.weight": ((e, s.n_ff), m["ffn"]),
            "ffn_up.weight": ((e, s.n_ff), m["ffn"]),
            "ffn_down.weight": ((s.n_ff, e), m["down"]),
        }
    if s.qkv_bias:
        t |= {
            "attn_q.bias": ((q,), Q.F32),
            "attn_k.bias": ((kv,), Q.F32),
            "attn_v.bias": ((kv,), Q.F32),
        }
    return t


def model_info(s: Shape, mix: str = "Q4_K_M") -> ModelInfo:
    m = MIXES[mix]
    d = s.head_dim or s.n_embd // s.n_head
    tensors = layer_tensors(s, mix)
    layer = sum(nbytes(shape, qt) for shape, qt in tensors.values())
    experts = sum(nbytes(shape, qt) for name, (shape, qt) in tensors.items() if "_exps" in name)
    embd = nbytes((s.n_embd, s.n_vocab), m["embd"])
    norm = nbytes((s.n_embd,), Q.F32)
    output = norm + (embd if s.tied else nbytes((s.n_embd, s.n_vocab), m["out"]))
    params = (
        s.n_layers * sum(_elems(shape) for shape, _ in tensors.values())
        + s.n_vocab * s.n_embd * (1 if s.tied else 2)
        + s.n_embd
    )
    return ModelInfo(
        architecture=s.arch,
        name=s.name,
        file_type=mix,
        parameter_count=params,
        n_layers=s.n_layers,
        n_embd=s.n_embd,
        n_head=s.n_head,
        n_head_kv=s.n_head_kv,
        head_dim_k=d,
        head_dim_v=d,
        context_length=s.n_ctx_train,
        n_vocab=s.n_vocab,
        layer_bytes=[layer] * s.n_layers,
        output_bytes=output,
        token_embd_bytes=embd,
        file_size=s.n_layers * layer + embd + output - (embd if s.tied else 0),
        expert_bytes=[experts] * s.n_layers if s.n_expert else [],
    )


def _elems(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def gpu(
    name: str,
    library: str,
    total_gib: float,
    free_gib: float | None = None,
    kind: DeviceKind = "gpu",
) -> Device:
    """A GPU with ``total_gib``; free defaults to 0.4 GiB less (a driver's own use)."""
    total = int(total_gib * GiB)
    free = int((free_gib if free_gib is not None else total_gib - 0.4) * GiB)
    return Device(name, f"test {library} GPU {total_gib:g} GiB", kind, free, total, library)


def cuda(i: int, total_gib: float, free_gib: float | None = None) -> Device:
    return gpu(f"CUDA{i}", "CUDA", total_gib, free_gib)


def rpc(host: str, total_gib: float, free_gib: float | None = None, index: int = 0) -> Device:
    """A device another machine serves over ggml RPC (``index`` > 0: its next device)."""
    suffix = f"#{index}" if index else ""
    return gpu(f"RPC[{host}]{suffix}", "RPC", total_gib, free_gib)


def igpu(total_gib: float, free_gib: float | None = None) -> Device:
    """An integrated GPU (its memory is system RAM)."""
    return gpu("Vulkan0", "Vulkan", total_gib, free_gib, kind="igpu")


def metal(total_gib: float, free_gib: float | None = None) -> Device:
    free = free_gib if free_gib is not None else total_gib
    return Device("Metal", "Apple M2 Max", "gpu", int(free * GiB), int(total_gib * GiB), "Metal")


def cpu(free_gib: float = 64, total_gib: float | None = None) -> Device:
    total = total_gib if total_gib is not None else max(free_gib, 64)
    return Device("CPU", "test CPU", "cpu", int(free_gib * GiB), int(total * GiB), "CPU")


ALL_SHAPES = {
    "qwen2-0.5b": model_info(QWEN2_05B, "Q8_0"),
    "llama3.2-1b": model_info(LLAMA32_1B, "Q8_0"),
    "llama2-7b": model_info(LLAMA2_7B, "Q4_0"),
    "llama3.1-8b": model_info(LLAMA31_8B, "Q4_K_M"),
    "llama3.1-70b": model_info(LLAMA31_70B, "Q4_K_M"),
}
QWEN3_MOE = model_info(QWEN3_30B_A3B, "Q4_K_M")  # 18.6 GB file; experts are 97% of a layer
