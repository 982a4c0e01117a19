"""Generate benchmark GGUFs: random weights, realistic llama shapes, a working tokenizer.

Speed does not depend on the weights' values, only on shapes and types, so we
write F16 models with random weights (numpy + the ``gguf`` package) and then
quantize them to Q4_K_M and Q8_0 through libllama's ``llama_model_quantize``
via our own binding (``localllm._native``), i.e. the same libllama the engine runs.

Models (both ``general.architecture = llama``, tied embeddings like the originals):
  0.5b  Qwen2.5-0.5B-like dims: 24 layers, embd 896, 14 heads, 2 kv heads,
        ffn 4864, vocab 151936 (no q/k/v biases: it is a llama, not a qwen2)
  1b    Llama-3.2-1B dims: 16 layers, embd 2048, 32 heads, 8 kv heads,
        ffn 8192, vocab 128256
(0.5b's rows of 896 are not a multiple of 256, so in Q4_K_M llama.cpp falls back
to q5_0/q8_0 for most of its tensors, exactly as it does for the real Qwen2.5-0.5B.)
We keep the real vocab sizes because the output matmul (vocab x embd) and the
sampler's work per token scale with the vocab: a 32000 vocab would flatter decode.

Tokenizer: a generated SentencePiece-style ("llama") vocab: <unk> <s> </s>, the
256 byte tokens, printable ASCII, then lowercase letter n-grams with and without
the word-start marker, so ordinary text tokenizes into 1-4 letter pieces.
The tied embedding rows of control and byte tokens are zero, so their logit is 0
while the best random logit is far above it: greedy decoding never emits EOS
(a benchmark run is never cut short) and never emits a lone byte (always valid UTF-8).

Run:   .venv/bin/python bench/gen_models.py                 # all models/quants
       .venv/bin/python bench/gen_models.py --model 0.5b --quant q4_k_m
Output: ${LOCALLLM_BENCH_CACHE:-~/.cache/localllm-bench}/models/llama-<size>-<quant>.gguf
(files already there are reused; --force rewrites them).
"""

from __future__ import annotations

import argparse
import itertools
import os
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPM_SPACE = "\u2581"  # SentencePiece's word-start marker
QUANTS = ("f16", "q4_k_m", "q8_0")
# gguf token types (llama.h's llama_token_type)
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class Spec:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    rope_base: float
    rms_eps: float
    label: str


SPECS = {
    "0.5b": Spec(24, 896, 14, 2, 4864, 151936, 32768, 1_000_000.0, 1e-6, "Qwen2.5-0.5B dims"),
    "1b": Spec(16, 2048, 32, 8, 8192, 128256, 131072, 500_000.0, 1e-5, "Llama-3.2-1B dims"),
}


def cache_dir() -> Path:
    env = os.environ.get("LOCALLLM_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "localllm-bench"


def model_path(size: str, quant: str) -> Path:
    return cache_dir() / "models" / f"llama-{size}-{quant}.gguf"


def resolve(spec: str) -> Path:
    """A GGUF path as given, or ``<size>-<quant>`` (``0.5b-q4_k_m``), generated on first use."""
    if spec.endswith(".gguf"):
        return Path(spec).expanduser()
    size, _, quant = spec.partition("-")
    if size not in SPECS or quant not in QUANTS:
        raise SystemExit(
            f"unknown model {spec!r}: a .gguf path or <size>-<quant> "
            f"({'|'.join(SPECS)} - {'|'.join(QUANTS)})"
        )
    return ensure(size, quant)


def build_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types for a synthetic SPM vocab of exactly n_vocab entries."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TT_UNKNOWN, TT_CONTROL, TT_CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TT_BYTE] * 256
    pieces = [SPM_SPACE, *(chr(c) for c in range(33, 127))]
    letters = string.ascii_lowercase

    # n-grams grouped by length so every piece's prefix comes earlier: the SPM
    # merge loop can then grow a word one letter at a time.
    def grams(n: int) -> list[str]:
        return ["".join(p) for p in itertools.product(letters, repeat=n)]

    for n in (1, 2, 3):
        pieces += [SPM_SPACE + g for g in grams(n)]
        pieces += grams(n + 1)
    want = n_vocab - len(tokens)
    if len(pieces) < want:
        raise ValueError(f"vocab generator tops out at {len(pieces) + len(tokens)} tokens")
    pieces = pieces[:want]
    tokens += pieces
    types += [TT_NORMAL] * len(pieces)
    # SPM merges pick the highest-scoring pair: longer pieces score higher so
    # words end up in few tokens, like a trained vocab.
    scores = [0.0] * 259 + [len(p) - i * 1e-7 for i, p in enumerate(pieces)]
    return tokens, scores, types


def write_f16(spec: Spec, out: Path, seed: int = 0) -> None:
    """Stream a random-weight F16 llama GGUF to out (tensor by tensor, low memory)."""
    import gguf

    rng = np.random.default_rng(seed)
    head_dim = spec.n_embd // spec.n_head
    kv_dim = head_dim * spec.n_head_kv
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"localllm-bench random llama ({spec.label})")
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(spec.rope_base)
    w.add_layer_norm_rms_eps(spec.rms_eps)
    w.add_vocab_size(spec.n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = build_vocab(spec.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )

    # (name, numpy shape as (rows=n_out, cols=n_in), is_norm)
    plan: list[tuple[str, tuple[int, ...], bool]] = [
        ("token_embd.weight", (spec.n_vocab, spec.n_embd), False)
    ]
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (spec.n_embd,), True),
            (b + "attn_q.weight", (spec.n_embd, spec.n_embd), False),
            (b + "attn_k.weight", (kv_dim, spec.n_embd), False),
            (b + "attn_v.weight", (kv_dim, spec.n_embd), False),
            (b + "attn_output.weight", (spec.n_embd, spec.n_embd), False),
            (b + "ffn_norm.weight", (spec.n_embd,), True),
            (b + "ffn_gate.weight", (spec.n_ff, spec.n_embd), False),
            (b + "ffn_up.weight", (spec.n_ff, spec.n_embd), False),
            (b + "ffn_down.weight", (spec.n_embd, spec.n_ff), False),
        ]
    plan.append(("output_norm.weight", (spec.n_embd,), True))
    for name, shape, is_norm in plan:
        dt = np.dtype(np.float32 if is_norm else np.float16)  # 1-D tensors stay F32
        w.add_tensor_info(name, shape, dt, int(np.prod(shape)) * dt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, is_norm in plan:
        if is_norm:
            data = np.ones(shape, dtype=np.float32)
        else:
            # std 1/sqrt(n_in) keeps activations O(1) through the layers
            std = 1.0 / np.sqrt(shape[1])
            data = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)
            if name == "token_embd.weight":
                data[: 3 + 256] = 0  # see the module docstring: no EOS, no bytes
        w.write_tensor_data(data)
        del data
    w.close()


def quantize(src: Path, dst: Path, quant: str, nthread: int) -> None:
    """Quantize through our binding, i.e. libllama's llama_model_quantize."""
    from localllm.engine import binding

    binding.quantize(src, dst, quant.upper(), nthread)


def ensure(size: str, quant: str, force: bool = False, nthread: int = 2) -> Path:
    """Return the path of model (size, quant), generating it (and its F16 source) if needed."""
    out = model_path(size, quant)
    if out.exists() and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    f16 = model_path(size, "f16")
    if not f16.exists() or (force and quant == "f16"):
        t0 = time.monotonic()
        tmp = f16.with_suffix(".tmp")
        write_f16(SPECS[size], tmp)
        tmp.replace(f16)  # a half-written file must never look finished
        print(f"wrote {f16} ({f16.stat().st_size / 1e9:.2f} GB, {time.monotonic() - t0:.0f}s)")
    if quant != "f16":
        t0 = time.monotonic()
        tmp = out.with_suffix(".tmp")
        quantize(f16, tmp, quant, nthread)
        tmp.replace(out)
        print(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB, {time.monotonic() - t0:.0f}s)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=[*SPECS, "all"], default="all")
    ap.add_argument("--quant", choices=[*QUANTS, "all"], default="all")
    ap.add_argument("--threads", type=int, default=2, help="quantization threads")
    ap.add_argument("--force", action="store_true", help="regenerate even if present")
    a = ap.parse_args(argv)
    sizes = list(SPECS) if a.model == "all" else [a.model]
    quants = list(QUANTS) if a.quant == "all" else [a.quant]
    for size in sizes:
        for quant in quants:
            print(ensure(size, quant, a.force, a.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
