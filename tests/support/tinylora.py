"""A tiny GGUF LoRA adapter for ``tests/support/tinymodel`` (or a mismatched one), for create tests.

The adapter has the layout llama.cpp's ``convert_lora_to_gguf`` writes:
``general.type = "adapter"``, ``adapter.type = "lora"``, ``adapter.lora.alpha``
and ``<tensor>.lora_a`` / ``<tensor>.lora_b`` pairs for ``blk.0.attn_q``.
``make_tiny_lora``'s weights are zero: those tests check storage and validation.

``make_remap_lora`` writes one that serves: a rank-``len(remap)`` LoRA on
``output.weight`` that moves the tiny model's successor of each token in
``remap`` (``{"a": "c"}``: after "a" comes "c", not "b").  Since the tiny
model's residual stream is the last token's one-hot vector, row ``i`` of
``lora_a`` picks the source token and column ``i`` of ``lora_b`` takes
``SHARPNESS`` from the old successor's logit and gives twice that to the new one,
so greedy decoding follows the new map.  ``n_embd`` other than the model's
makes a mismatched adapter (same architecture, wrong tensor shapes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.tinymodel import N_EMBD, N_VOCAB, SHARPNESS, successors, token_id


def make_tiny_lora(
    dir: Path, *, arch: str = "llama", name: str = "lora.gguf", rank: int = 4, adapter: bool = True
) -> Path:
    import gguf

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-lora")
    if adapter:
        w.add_string("general.type", "adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(rank))
    f32 = np.float32
    # numpy shapes are ggml's reversed: lora_a is [n_in, r], lora_b is [r, n_out].
    w.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((rank, N_EMBD), dtype=f32))
    w.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((N_EMBD, rank), dtype=f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def make_remap_lora(
    dir: Path, remap: dict[str, str], *, name: str = "remap.gguf", n_embd: int = N_EMBD
) -> Path:
    import gguf

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    rank = len(remap)
    nxt = successors()
    # The model scales one-hot rows by sqrt(N_EMBD) after its final RMS norm.
    unit = SHARPNESS / np.sqrt(N_EMBD)
    a = np.zeros((rank, n_embd), dtype=np.float32)
    b = np.zeros((N_VOCAB, rank), dtype=np.float32)
    for i, (src, dst) in enumerate(sorted(remap.items())):
        t = token_id(src)
        a[i, t % n_embd] = 1.0  # (a mismatched adapter only needs the wrong shape)
        b[nxt[t], i] = -unit
        b[token_id(dst), i] = 2 * unit
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-remap")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))  # scale alpha / rank = 1
    w.add_tensor("output.weight.lora_a", a)
    w.add_tensor("output.weight.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
