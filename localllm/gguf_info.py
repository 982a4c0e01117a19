"""GGUF metadata -> ModelInfo.

Reads a GGUF file's header (key/values and tensor descriptors) once, with
bounded memory and strict limits, and refuses truncated, non-GGUF or hostile
files with ``InvalidModelFile`` before libllama ever sees them.

(The reader itself is implemented below the dataclass; the dataclass is the
contract the planner, the store and ``/api/show`` rely on.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelInfo:
    """What localllm needs to know about a GGUF model without loading it."""

    architecture: str  # general.architecture, e.g. "llama", "qwen2"
    name: str  # general.name or ""
    file_type: str  # quantization label, e.g. "Q4_K_M", "F16"
    parameter_count: int  # sum of tensor elements
    n_layers: int  # <arch>.block_count
    n_embd: int  # <arch>.embedding_length
    n_head: int  # <arch>.attention.head_count (max over layers)
    n_head_kv: int  # <arch>.attention.head_count_kv (max over layers; defaults to n_head)
    head_dim_k: int  # <arch>.attention.key_length or n_embd // n_head
    head_dim_v: int  # <arch>.attention.value_length or n_embd // n_head
    context_length: int  # <arch>.context_length (training context)
    n_vocab: int  # len(tokenizer.ggml.tokens) or <arch>.vocab_size
    layer_bytes: list[int]  # bytes of blk.<i>.* tensors, per layer
    output_bytes: int  # output + output_norm (token_embd when tied)
    token_embd_bytes: int
    file_size: int
    chat_template: str | None = None  # tokenizer.chat_template
    bos_token: str | None = None
    eos_token: str | None = None
    pooling_type: int | None = None  # <arch>.pooling_type: embedding models
    is_adapter: bool = False  # general.type == "adapter" (LoRA)
    kv: dict[str, Any] = field(default_factory=dict)  # scalar metadata (arrays summarised)

    @property
    def parameter_size(self) -> str:
        """Human label like Ollama's: ``"494.03M"``, ``"8.0B"``."""
        n = self.parameter_count
        if n >= 1_000_000_000:
            return f"{n / 1e9:.1f}B"
        if n >= 1_000_000:
            return f"{n / 1e6:.2f}M"
        return f"{n / 1e3:.2f}K"
