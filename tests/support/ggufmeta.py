"""Write small, metadata-valid GGUF files for tests (owned by the store/GGUF engineer).

Two ways to use it:

* ``write_gguf(path, Shape(...))`` writes a GGUF with the architecture
  metadata you choose (layers, heads, kv heads, embedding length, context
  length, vocabulary, chat template, file type) and the full llama-style tensor
  set for that shape.  Tensor descriptors always declare the *real* shape, so
  ``layer_bytes`` and friends are realistic.  Data is zeros written as a sparse
  tail (``truncate``), so even a 70B descriptor costs a few MB of actual disk;
  ``data="random"`` fills F32/F16 tensors with small random values instead
  (only for small shapes: refused over 256 MiB).
* ``SHAPES`` holds real shapes ("0.5b" qwen2, "1b" llama 3.2, "7b" llama 2,
  "8b" llama 3, "70b" llama 3) and ``model_info_for("7b", "Q4_K_M")`` returns the
  ``ModelInfo`` that ``read_model_info`` gives for such a file (written sparse
  into a temporary folder and read back through the real parser).

``write_split_gguf`` writes ``<stem>-0000i-of-0000N.gguf`` shards like
llama.cpp's ``gguf-split``.  Quantised tensors need rows that are a multiple of
their block size; where a shape's row is not, the tensor falls back to Q8_0 or
F32 (as real quantisers do).
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, LlamaFileType

from localllm.gguf.info import ModelInfo, read_model_info

Q = GGMLQuantizationType
# (bulk weights, "important" weights: attn_v, ffn_down, output) per file type.
_QUANT_TYPES: dict[str, tuple[GGMLQuantizationType, GGMLQuantizationType]] = {
    "F32": (Q.F32, Q.F32),
    "F16": (Q.F16, Q.F16),
    "BF16": (Q.BF16, Q.BF16),
    "Q8_0": (Q.Q8_0, Q.Q8_0),
    "Q4_0": (Q.Q4_0, Q.Q4_0),
    "Q4_K_M": (Q.Q4_K, Q.Q6_K),
    "Q4_K_S": (Q.Q4_K, Q.Q4_K),
    "Q5_K_M": (Q.Q5_K, Q.Q6_K),
    "Q6_K": (Q.Q6_K, Q.Q6_K),
}


@dataclass(frozen=True)
class Shape:
    arch: str = "llama"
    name: str = "tiny-test"
    n_layers: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_vocab: int = 64
    context_length: int = 2048
    tied_output: bool = False
    attn_bias: bool = False  # qwen2 has q/k/v biases
    chat_template: str | None = "{% for m in messages %}{{ m.content }}{% endfor %}"
    bos_id: int | None = 1
    eos_id: int | None = 2
    eot_id: int | None = None
    tokens: tuple[str, ...] | None = None  # default: <unk>, <s>, </s>, t3, t4, ...
    extra_kv: tuple[tuple[str, Any], ...] = ()


SHAPES: dict[str, Shape] = {
    "0.5b": Shape(
        "qwen2",
        "Qwen2.5 0.5B",
        24,
        896,
        14,
        2,
        4864,
        151936,
        32768,
        tied_output=True,
        attn_bias=True,
        eos_id=151645,
    ),
    "1b": Shape(
        "llama",
        "Llama 3.2 1B",
        16,
        2048,
        32,
        8,
        8192,
        128256,
        131072,
        tied_output=True,
        bos_id=128000,
        eos_id=128009,
    ),
    "7b": Shape("llama", "Llama 2 7B", 32, 4096, 32, 32, 11008, 32000, 4096),
    "8b": Shape(
        "llama", "Llama 3 8B", 32, 4096, 32, 8, 14336, 128256, 8192, bos_id=128000, eos_id=128009
    ),
    "70b": Shape(
        "llama", "Llama 3 70B", 80, 8192, 64, 8, 28672, 128256, 131072, bos_id=128000, eos_id=128009
    ),
}


def _fit(ttype: GGMLQuantizationType, row: int) -> GGMLQuantizationType:
    for candidate in (ttype, Q.Q8_0, Q.F32):
        if row % GGML_QUANT_SIZES[candidate][0] == 0:
            return candidate
    return Q.F32


def _nbytes(ttype: GGMLQuantizationType, ne: tuple[int, ...]) -> int:
    block, size = GGML_QUANT_SIZES[ttype]
    return int(np.prod(ne)) // block * size


def tensor_plan(shape: Shape, quant: str = "F32") -> list[tuple[str, tuple[int, ...], Q]]:
    """``(name, ggml dims ne0-first, type)`` of every tensor a model of ``shape`` has."""
    bulk, important = _QUANT_TYPES[quant.upper()]
    e, hd = shape.n_embd, shape.n_embd // shape.n_head
    q_out, kv_out = shape.n_head * hd, shape.n_head_kv * hd
    out: list[tuple[str, tuple[int, ...], Q]] = [
        ("token_embd.weight", (e, shape.n_vocab), _fit(bulk, e))
    ]
    for i in range(shape.n_layers):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (e,), Q.F32),
            (p + "attn_q.weight", (e, q_out), _fit(bulk, e)),
            (p + "attn_k.weight", (e, kv_out), _fit(bulk, e)),
            (p + "attn_v.weight", (e, kv_out), _fit(important, e)),
            (p + "attn_output.weight", (q_out, e), _fit(bulk, q_out)),
            (p + "ffn_norm.weight", (e,), Q.F32),
            (p + "ffn_gate.weight", (e, shape.n_ff), _fit(bulk, e)),
            (p + "ffn_up.weight", (e, shape.n_ff), _fit(bulk, e)),
            (p + "ffn_down.weight", (shape.n_ff, e), _fit(important, shape.n_ff)),
        ]
        if shape.attn_bias:
            out += [
                (p + "attn_q.bias", (q_out,), Q.F32),
                (p + "attn_k.bias", (kv_out,), Q.F32),
                (p + "attn_v.bias", (kv_out,), Q.F32),
            ]
    out.append(("output_norm.weight", (e,), Q.F32))
    if not shape.tied_output:
        out.append(("output.weight", (e, shape.n_vocab), _fit(important, e)))
    return out


def _file_type(quant: str) -> int:
    label = quant.upper()
    for member in LlamaFileType:
        if member.name in (f"MOSTLY_{label}", f"ALL_{label}"):
            return int(member.value)
    raise ValueError(f"unknown file type {quant}")


def _writer(path: Path, shape: Shape, quant: str, split_max_tensors: int) -> GGUFWriter:
    w = GGUFWriter(path, shape.arch, split_max_tensors=split_max_tensors)
    w.add_name(shape.name)
    w.add_file_type(_file_type(quant))
    w.add_block_count(shape.n_layers)
    w.add_context_length(shape.context_length)
    w.add_embedding_length(shape.n_embd)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    tokens = (
        list(shape.tokens)
        if shape.tokens is not None
        else (["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, shape.n_vocab)])[
            : shape.n_vocab
        ]
    )
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([1] * len(tokens))
    for key, tid in (("bos", shape.bos_id), ("eos", shape.eos_id), ("eot", shape.eot_id)):
        if tid is not None:
            w.add_uint32(f"tokenizer.ggml.{key}_token_id", tid)
    if shape.chat_template is not None:
        w.add_chat_template(shape.chat_template)
    for key, value in shape.extra_kv:
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bool):  # before int: a bool is an int to Python
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_array(key, value)
    for name, ne, ttype in tensor_plan(shape, quant):
        # GGUFWriter takes numpy order (last ggml dim first) and reverses it.
        w.add_tensor_info(
            name, tuple(reversed(ne)), np.dtype(np.float32), _nbytes(ttype, ne), raw_dtype=ttype
        )
    return w


def _finish(w: GGUFWriter, data: str, seed: int) -> list[Path]:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None and w.path is not None
    paths = w.format_shard_names(w.path)
    rng = np.random.default_rng(seed)
    align = w.data_alignment
    for fout, tensors in zip(w.fout, w.tensors, strict=True):
        start = -(-fout.tell() // align) * align
        total = sum(-(-ti.nbytes // align) * align for ti in tensors.values())
        if data == "random":
            if total > 256 << 20:
                raise ValueError("random data only for small shapes")
            fout.write(b"\0" * (start - fout.tell()))
            for ti in tensors.values():
                if ti.dtype in (Q.F32, Q.F16):
                    kind = np.float32 if ti.dtype == Q.F32 else np.float16
                    arr = rng.standard_normal(ti.nbytes // np.dtype(kind).itemsize) * 0.02
                    fout.write(arr.astype(kind).tobytes())
                else:
                    fout.write(b"\0" * ti.nbytes)
                fout.write(b"\0" * (-ti.nbytes % align))
        fout.truncate(start + total)
    w.close()
    return paths


def write_gguf(
    path: Path,
    shape: Shape | None = None,
    quant: str = "F32",
    *,
    data: str = "zeros",
    seed: int = 0,
) -> Path:
    """Write one GGUF for ``shape`` (default: a tiny 2-layer llama) at ``path``."""
    shape = shape or Shape()
    return _finish(_writer(Path(path), shape, quant, 0), data, seed)[0]


def write_split_gguf(
    folder: Path, stem: str, shape: Shape | None = None, quant: str = "F32", *, n_splits: int = 2
) -> list[Path]:
    """Write ``<stem>-0000i-of-0000N.gguf`` shards (metadata in the first one)."""
    shape = shape or Shape()
    n_tensors = len(tensor_plan(shape, quant))
    per = -(-n_tensors // n_splits)
    paths = _finish(_writer(Path(folder) / f"{stem}.gguf", shape, quant, per), "zeros", 0)
    assert len(paths) == n_splits, f"asked for {n_splits} shards, got {len(paths)}"
    return paths


def model_info_for(shape: str | Shape, quant: str = "Q4_K_M", **changes: Any) -> ModelInfo:
    """``ModelInfo`` of a real-shaped model (``SHAPES`` key or a ``Shape``), via the parser."""
    base = SHAPES[shape] if isinstance(shape, str) else shape
    if changes:
        base = dataclasses.replace(base, **changes)
    with tempfile.TemporaryDirectory() as tmp:
        return read_model_info(write_gguf(Path(tmp) / "model.gguf", base, quant))
