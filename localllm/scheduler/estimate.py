"""Memory arithmetic for one model: KV cache, compute graph and per-layer sizes (pure).

The formulas follow Ollama's classic estimator (reference notes §8.3) with
two corrections taken from llama.cpp itself: quantized KV caches use ggml's
real block sizes (q8_0 is 34 bytes per 32 values, not 1 byte per value), and
the context is sized the way the engine asks ``llama_context`` for it: one
unified KV cache of ``max(n_ctx, 8) · n_parallel`` cells, padded to 256.
"""

from __future__ import annotations

from localllm.config import KV_TYPES
from localllm.format import format_bytes
from localllm.gguf.info import ModelInfo

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# (bytes, values) per ggml block of each cache type.
_GGML_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
}
# Keyed by config.KV_TYPES, the one list of cache types localllm offers, so the
# estimate never plans for a type the runner refuses; a type added there without
# its block size here fails at import.
KV_BLOCKS: dict[str, tuple[int, int]] = {kv: _GGML_BLOCKS[kv] for kv in KV_TYPES}
QUANTIZED_KV = frozenset(k for k, (_, n) in KV_BLOCKS.items() if n > 1)

# Architectures whose graph matches the llama formula closely enough: decoder-only
# transformers with grouped-query attention and a SwiGLU FFN.
LLAMA_FAMILY = frozenset(
    {
        "llama",
        "llama4",
        "mistral",
        "mistral3",
        "qwen2",
        "qwen3",
        "granite",
        "olmo",
        "olmo2",
        "internlm2",
        "stablelm",
        "starcoder2",
        "exaone",
        "smollm3",
        "deepseek",
        "phi3",
        "gemma",
        "gemma2",
        "gemma3",
        "command-r",
        "cohere2",
    }
)

CTX_PAD = 256  # llama_context pads n_ctx to this many cells
MIN_SLOT_CTX = 8  # the engine never gives a slot fewer cells (engine.Engine)


def fmt_bytes(n: int | float) -> str:
    """``5476083302`` -> ``"5.1 GiB"``; ``478150656`` -> ``"456 MiB"`` (``format.py``'s rule)."""
    return format_bytes(n, binary=True)


def kv_cells(n_ctx: int, n_parallel: int = 1) -> int:
    """KV cells llama.cpp allocates for ``n_parallel`` slots of ``n_ctx`` each.

    The engine asks for one unified cache of ``n_ctx · n_parallel`` cells (every
    slot's context, not one shared context), and llama.cpp pads that total, not
    each slot, to 256: 4 slots of 1000 are 4096 cells, 4 slots of 100 are 512.
    """
    total = max(n_ctx, MIN_SLOT_CTX) * max(n_parallel, 1)
    return -(-total // CTX_PAD) * CTX_PAD


def kv_type_bytes(kv_type: str, n_values: int) -> int:
    """Bytes of ``n_values`` cache values of ``kv_type`` (whole ggml blocks)."""
    size, per = KV_BLOCKS.get(kv_type, KV_BLOCKS["f16"])
    return -(-n_values // per) * size


def kv_layer_bytes(info: ModelInfo, cells: int, kv_type: str = "f16") -> int:
    """K and V of one attention layer for ``cells`` cells."""
    row_k = kv_type_bytes(kv_type, info.n_head_kv * info.head_dim_k)
    row_v = kv_type_bytes(kv_type, info.n_head_kv * info.head_dim_v)
    return cells * (row_k + row_v)


def estimate_kv_bytes(
    info: ModelInfo, n_ctx: int, n_parallel: int = 1, kv_type: str = "f16", *, pad: bool = True
) -> int:
    """Whole KV cache: ``cells · n_head_kv · (head_dim_k + head_dim_v) · bytes`` per layer.

    ``pad=False`` gives the textbook figure (exactly ``n_ctx · n_parallel`` cells).
    """
    cells = kv_cells(n_ctx, n_parallel) if pad else n_ctx * max(n_parallel, 1)
    return info.n_layers * kv_layer_bytes(info, cells, kv_type)


def graph_bytes(
    info: ModelInfo, n_ctx: int, n_parallel: int, n_batch: int, flash_attention: bool, kv_total: int
) -> tuple[int, int]:
    """Compute-graph reserve ``(full_offload, partial_offload)`` in bytes.

    Without flash attention the KQ score matrix (``ctx × batch × heads`` f32)
    dominates; with it llama.cpp tiles the scores, so only the f16 mask
    (``ctx × batch × 2`` bytes) scales with the context.  Checked against
    llama.cpp's CPU compute buffer for a 58M llama: 148 vs 150 MiB without
    flash attention at 8192 cells, 63.5 vs 64.5 MiB with it.
    """
    e, h, v = info.n_embd, max(info.n_head, 1), info.n_vocab
    hkv = max(info.n_head_kv, 1)
    c = kv_cells(n_ctx, n_parallel)
    b = max(min(n_ctx * max(n_parallel, 1), n_batch), 1)
    if info.architecture not in LLAMA_FAMILY:
        partial = int(h / hkv * kv_total / 6)
        return partial, partial
    attn = c * (1 + h) if not flash_attention else c // 2
    full = max(4 * b * (1 + 4 * e + attn), 4 * b * (e + v))
    head_dim = info.head_dim_k or e // h
    partial = 4 * b * e + max(
        4 * b * (1 + e + max(c, e))
        + e * e * 9 // 16
        + (4 * c * (b * h + head_dim * hkv) if not flash_attention else 4 * c * head_dim * hkv),
        4 * b * (e + v) + e * v * 105 // 128,
    )
    return full, partial


def host_graph_bytes(info: ModelInfo, n_batch: int) -> int:
    """Host-side compute buffer when the graph runs on a GPU: inputs and a few activations."""
    return 4 * n_batch * info.n_embd * 3
