"""GGUF metadata -> ModelInfo.

Reads a GGUF file's header (key/values and tensor descriptors) once, with
bounded memory and strict limits, and refuses truncated, non-GGUF or hostile
files with ``InvalidModelFile`` before libllama ever sees them.

The dataclass is the contract the planner, the store and ``/api/show`` rely
on; ``gguf.reader`` reads the header itself.  ``kv`` holds scalars and short
arrays, and a long array appears there as ``None`` with its length in
``array_lengths``.  Also here: whether llama.cpp's tokenizer adds BOS for a
model (``tokenizer_adds_bos``), which decides whether a template's own BOS
is kept.  ``ModelInfo.matrices`` lists the weight matrices with their types,
shapes and place in the file, for the planner's count of the CPU backend's
repacked copies (scheduler/repack.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from localllm.errors import InvalidModelFile
from localllm.gguf.reader import BLK_RE, EXPS_RE, MAX_LAYERS, Header, read_header


class Matrix(NamedTuple):
    """A weight llama.cpp multiplies by (MUL_MAT; MUL_MAT_ID for experts): what the CPU
    backend's extra buffers may keep a repacked copy of (scheduler/repack.py)."""

    layer: int  # blk.<layer>; -1 outside the blocks (the output layer's)
    ggml_type: int
    experts: bool  # a stack of experts (EXPS_RE)
    k: int  # values per row (ne[0])
    rows: int  # rows (ne[1]), per expert for a stack
    nbytes: int
    # Lies between two vectors (1-D tensors) of its file; False for token_embd reused as
    # the output matrix (tied embeddings), whose file pages are token_embd's.
    inner: bool


# Tensors of 2+ dimensions llama.cpp does not multiply by (LLM_TENSOR_INFOS in its
# src/llama-arch.cpp): input lookups (GET_ROWS) and convolution / state-space weights.
_NOT_MATMUL = re.compile(
    r"^(token_embd|position_embd|token_types|per_layer_token_embd)\.|"
    r"embed_tokens|rel_b|_ape\.|tid2eid|conv|ssm_a\b"
)


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
    eot_token: str | None = None  # tokenizer.ggml.eot_token_id's text
    other_bytes: int = 0  # tensors outside blk.*, token_embd and output (rope_freqs, ...)
    array_lengths: dict[str, int] = field(default_factory=dict)  # every array's length
    tensor_count: int = 0
    # Bytes of blk.<i>'s expert tensors (what llama.cpp's --n-cpu-moe keeps in RAM),
    # per layer; empty for a dense model.
    expert_bytes: list[int] = field(default_factory=list)
    matrices: tuple[Matrix, ...] = ()  # every weight matrix, for the CPU's repacked copies
    # A classification head (cls.*, cls.output.* tensors): a reranker's, which llama.cpp
    # applies with rank pooling (inference/rerank.py).
    rank_head: bool = False

    @property
    def add_bos_token(self) -> bool:
        """Whether llama.cpp's tokenizer puts BOS in front of a prompt for this model."""
        return tokenizer_adds_bos(self.kv)

    @property
    def parameter_size(self) -> str:
        """Human label like Ollama's: ``"494.03M"``, ``"8.0B"``."""
        n = self.parameter_count
        if n >= 1_000_000_000:
            return f"{n / 1e9:.1f}B"
        if n >= 1_000_000:
            return f"{n / 1e6:.2f}M"
        return f"{n / 1e3:.2f}K"


# BPE pre-tokenizers for which llama.cpp adds BOS when the GGUF does not say.
_BPE_PRE_WITH_BOS = frozenset(
    {
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "tekken",
        "chameleon",
        "gemma4",
        "granite-embed-multi-311m",
    }
)


def tokenizer_adds_bos(kv: Mapping[str, object]) -> bool:
    """llama.cpp's ``add_bos`` for a GGUF: ``tokenizer.ggml.add_bos_token`` when present,
    else its default for the tokenizer model (SentencePiece and WordPiece add one, T5
    and RWKV do not, BPE only for some pre-tokenizers); Gemma 4 always adds one."""
    model = kv.get("tokenizer.ggml.model")
    pre = kv.get("tokenizer.ggml.pre")
    if model == "gemma4" or pre in ("gemma4", "granite-embed-multi-311m"):
        return True
    explicit = kv.get("tokenizer.ggml.add_bos_token")
    if isinstance(explicit, bool):
        return explicit
    if model in ("llama", "bert"):
        return True
    if model == "gpt2":
        return pre in _BPE_PRE_WITH_BOS
    return False


def _file_type_label(kv: Mapping[str, object], tensors: Iterable[tuple[str, int, int, int]]) -> str:
    import gguf

    ft = kv.get("general.file_type")
    if isinstance(ft, int):
        try:
            name = gguf.LlamaFileType(ft).name
        except ValueError:
            name = ""
        if name and name != "GUESSED":
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    # No (known) file type: label by the type holding most bytes of 2D weights.
    by_type: dict[int, int] = {}
    for name, _elems, nbytes, ttype in tensors:
        if name.endswith(".weight") and "norm" not in name:
            by_type[ttype] = by_type.get(ttype, 0) + nbytes
    if not by_type:
        return "unknown"
    return gguf.GGMLQuantizationType(max(by_type, key=lambda t: by_type[t])).name


def _as_max(value: Any, default: int = 0) -> int:
    if isinstance(value, list):
        ints = [v for v in value if isinstance(v, int)]
        return max(ints) if ints else default
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _matrices(headers: list[Header], tied: bool) -> tuple[Matrix, ...]:
    out = []
    for h in headers:
        if len(h.layout) != len(h.tensors):  # a header put together without the layout
            continue
        vectors = [offset for dims, offset in h.layout if len(dims) == 1]
        lo, hi = (min(vectors), max(vectors)) if vectors else (0, -1)
        for (name, _n, nbytes, ttype), (dims, offset) in zip(h.tensors, h.layout, strict=True):
            if tied and name == "token_embd.weight" and len(dims) == 2:
                out.append(Matrix(-1, ttype, False, dims[0], dims[1], nbytes, False))
            if len(dims) < 2 or _NOT_MATMUL.search(name):
                continue
            m = BLK_RE.match(name)
            experts = bool(m and EXPS_RE.match(name, m.end()))
            if len(dims) > 2 and not experts:
                continue  # batched 3-D products (MLA's k_b, v_b): small, left out
            out.append(
                Matrix(
                    int(m.group(1)) if m else -1,
                    ttype,
                    experts,
                    dims[0],
                    dims[1],
                    nbytes,
                    lo < offset < hi,
                )
            )
    return tuple(out)


@dataclass
class _Tally:
    """A model's tensors summed by where llama.cpp places them, and its parameter count."""

    layers: dict[int, int] = field(default_factory=dict)  # bytes of each blk.N
    experts: dict[int, int] = field(default_factory=dict)  # of which expert tensors
    params: int = 0
    token_embd: int = 0
    output: int = 0  # output and output_norm (token_embd's bytes too when tied)
    other: int = 0
    has_output: bool = False  # an output.weight of its own (else tied embeddings)


def _tally(tensors: Iterable[tuple[str, int, int, int]]) -> _Tally:
    t = _Tally()
    for name, elems, nbytes, _t in tensors:
        t.params += elems
        m = BLK_RE.match(name)
        if m:
            idx = int(m.group(1))
            if idx >= MAX_LAYERS:
                raise InvalidModelFile(f"not a valid GGUF model: tensor {name!r} names layer {idx}")
            t.layers[idx] = t.layers.get(idx, 0) + nbytes
            if EXPS_RE.match(name, m.end()):
                t.experts[idx] = t.experts.get(idx, 0) + nbytes
        elif name.startswith("token_embd."):
            t.token_embd += nbytes
        elif name.startswith(("output.", "output_norm.")):
            t.output += nbytes
            t.has_output = t.has_output or name.startswith("output.")
        else:
            t.other += nbytes
    if not t.has_output:
        t.output += t.token_embd  # tied embeddings: the output layer reuses token_embd
    return t


def _build(headers: list[Header]) -> ModelInfo:
    first = headers[0]
    kv = {k: v for k, v in first.kv.items() if not k.startswith("_token.")}
    arch = kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise InvalidModelFile("not a valid GGUF model: general.architecture is missing")

    def num(key: str, default: int = 0) -> int:
        return _as_max(kv.get(f"{arch}.{key}"), default)

    tensors = [t for h in headers for t in h.tensors]
    tally = _tally(tensors)
    layers, experts = tally.layers, tally.experts
    n_layers = num("block_count")
    if not 0 <= n_layers <= MAX_LAYERS:
        raise InvalidModelFile(f"not a valid GGUF model: block_count {n_layers}")
    count = max(n_layers, max(layers) + 1 if layers else 0)
    n_embd, n_head = num("embedding_length"), num("attention.head_count")
    n_head_kv = num("attention.head_count_kv", n_head)
    per_head = n_embd // n_head if n_head else 0

    def text(key: str) -> str | None:
        value = first.kv.get(key)
        return value if isinstance(value, str) else None

    tokens_len = first.array_lengths.get("tokenizer.ggml.tokens")
    pooling = kv.get(f"{arch}.pooling_type")
    return ModelInfo(
        architecture=arch,
        name=text("general.name") or "",
        file_type=_file_type_label(kv, tensors),
        parameter_count=tally.params,
        n_layers=n_layers or count,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=num("attention.key_length", per_head),
        head_dim_v=num("attention.value_length", per_head),
        context_length=num("context_length"),
        n_vocab=tokens_len if tokens_len is not None else num("vocab_size"),
        layer_bytes=[layers.get(i, 0) for i in range(count)],
        output_bytes=tally.output,
        token_embd_bytes=tally.token_embd,
        file_size=sum(h.file_size for h in headers),
        chat_template=text("tokenizer.chat_template"),
        bos_token=text("_token.bos"),
        eos_token=text("_token.eos"),
        pooling_type=pooling if isinstance(pooling, int) else None,
        is_adapter=kv.get("general.type") == "adapter",
        kv=kv,
        eot_token=text("_token.eot"),
        other_bytes=tally.other,
        array_lengths=dict(first.array_lengths),
        tensor_count=len(tensors),
        expert_bytes=[experts.get(i, 0) for i in range(count)] if experts else [],
        matrices=_matrices(headers, not tally.has_output),
        rank_head=any(name.startswith("cls.") for name, *_ in tensors),
    )


def read_model_info(path: str | Path) -> ModelInfo:
    """Read a GGUF's metadata; raises ``InvalidModelFile`` for anything malformed."""
    return _build([read_header(Path(path))])


def read_model_info_split(paths: list[Path]) -> ModelInfo:
    """Read a split GGUF (``-00001-of-0000N``): metadata from the first shard, sizes summed."""
    if not paths:
        raise InvalidModelFile("a split model needs at least one file")
    return model_info_from_headers([read_header(Path(p)) for p in paths])


def model_info_from_headers(headers: list[Header]) -> ModelInfo:
    """``ModelInfo`` from the headers of one GGUF or of every shard of a split one, in
    order, however they were read (store/remote.py reads them over HTTP)."""
    if not headers:
        raise InvalidModelFile("a split model needs at least one file")
    total = _as_max(headers[0].kv.get("split.count"), len(headers))
    if len(headers) > 1 and total != len(headers):
        raise InvalidModelFile(f"split model declares {total} files, {len(headers)} given")
    return _build(headers)
