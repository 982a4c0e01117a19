"""A tiny llama GGUF with random dense weights, generated at test time: every logit differs.

The alphabet model (tests/support/tinymodel.py) leaves most logits exactly 0, so tokens tie,
and the order in which two samplers list tied tokens is theirs to choose: draws
would differ for that reason alone.  Here every weight is random (seeded), so the
logits of a row are all distinct and spread over a few units, and samplers that
agree on the rules must agree on the tokens.  Same vocabulary as the alphabet
model (``tinymodel.write_vocab``), so prompts tokenize one character per token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.tinymodel import N_VOCAB, write_vocab

N_EMBD, N_HEAD, N_FF, N_LAYER = 64, 4, 128, 2


def make_dense_model(
    dir: Path, *, seed: int = 0, name: str = "dense.gguf", logit_scale: float = 3.0
) -> Path:
    """Write the model into ``dir`` and return its path.  ``logit_scale``: about the
    standard deviation of a row's logits (higher: sharper distributions)."""
    import gguf  # heavy import kept out of module import

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("dense")
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all f32
    write_vocab(w)
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return rng.normal(0.0, std, shape).astype(np.float32)

    ones = np.ones(N_EMBD, dtype=np.float32)
    w.add_tensor("token_embd.weight", rand(N_VOCAB, N_EMBD, std=1.0))
    w.add_tensor("output_norm.weight", ones)
    # After the final RMS norm the state has unit scale per element: logit std is
    # std * sqrt(N_EMBD).
    w.add_tensor("output.weight", rand(N_VOCAB, N_EMBD, std=logit_scale / np.sqrt(N_EMBD)))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD, std=0.2))
        w.add_tensor(p + "attn_k.weight", rand(N_EMBD, N_EMBD, std=0.2))
        w.add_tensor(p + "attn_v.weight", rand(N_EMBD, N_EMBD, std=0.2))
        w.add_tensor(p + "attn_output.weight", rand(N_EMBD, N_EMBD, std=0.2))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD, std=0.2))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD, std=0.2))
        w.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF, std=0.2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
