"""Write a llama-shaped GGUF with filler weights, for checking memory estimates against llama.cpp.

Weight values do not matter to memory use, so every matrix is a repeated small
tile (fast to write); shapes, types and metadata are those of a real llama.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class LlamaShape:
    n_layers: int = 8
    n_embd: int = 512
    n_ff: int = 1536
    n_head: int = 8
    n_head_kv: int = 4
    n_vocab: int = 32000
    n_ctx_train: int = 4096
    tied: bool = False


def _fill(shape: tuple[int, ...], dtype: type[np.floating]) -> np.ndarray:
    tile = (np.arange(1024, dtype=np.float32) % 17 - 8) * 0.01
    n = int(np.prod(shape))
    return np.resize(tile, n).astype(dtype).reshape(shape)


def write_llama(path: Path, s: LlamaShape = LlamaShape()) -> Path:
    """Write an F16 llama GGUF of shape ``s`` to ``path``."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("planner-check")
    w.add_block_count(s.n_layers)
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_dimension_count(s.n_embd // s.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    tokens = ["<unk>", "<s>", "</s>", *byte_tokens]
    tokens += [f"tok{i}" for i in range(s.n_vocab - len(tokens))]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * s.n_vocab)
    types = [2, 3, 3] + [6] * 256 + [1] * (s.n_vocab - 259)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    e, kv = s.n_embd, s.n_embd // s.n_head * s.n_head_kv
    w.add_tensor("token_embd.weight", _fill((s.n_vocab, e), np.float16))
    for i in range(s.n_layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(e, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", _fill((e, e), np.float16))
        w.add_tensor(p + "attn_k.weight", _fill((kv, e), np.float16))
        w.add_tensor(p + "attn_v.weight", _fill((kv, e), np.float16))
        w.add_tensor(p + "attn_output.weight", _fill((e, e), np.float16))
        w.add_tensor(p + "ffn_norm.weight", np.ones(e, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", _fill((s.n_ff, e), np.float16))
        w.add_tensor(p + "ffn_up.weight", _fill((s.n_ff, e), np.float16))
        w.add_tensor(p + "ffn_down.weight", _fill((e, s.n_ff), np.float16))
    w.add_tensor("output_norm.weight", np.ones(e, dtype=np.float32))
    if not s.tied:
        w.add_tensor("output.weight", _fill((s.n_vocab, e), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
