"""A tiny GGUF LoRA adapter for ``tests/tinymodel`` (or a mismatched one), for create tests.

The adapter has the layout llama.cpp's ``convert_lora_to_gguf`` writes:
``general.type = "adapter"``, ``adapter.type = "lora"``, ``adapter.lora.alpha``
and ``<tensor>.lora_a`` / ``<tensor>.lora_b`` pairs for ``blk.0.attn_q``.
Its weights are zero: these tests check storage and validation, not serving.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.tinymodel import N_EMBD


def make_tiny_lora(dir: Path, *, arch: str = "llama", name: str = "lora.gguf",
                   rank: int = 4, adapter: bool = True) -> Path:
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
