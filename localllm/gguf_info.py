"""GGUF metadata -> ModelInfo.

Reads a GGUF file's header (key/values and tensor descriptors) once, with
bounded memory and strict limits, and refuses truncated, non-GGUF or hostile
files with ``InvalidModelFile`` before libllama ever sees them.

The dataclass is the contract the planner, the store and ``/api/show`` rely
on.  The reader walks the file through a small buffer: it never maps the file
and never trusts a count or a length before checking it against a cap and
against the bytes actually left in the file, so a hostile header is refused in
milliseconds with bounded memory.  Long arrays (the vocabulary, merges) are
counted and skipped, not kept: ``kv`` holds scalars and short arrays, and a
long array appears there as ``None`` with its length in ``array_lengths``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from localllm.errors import InvalidModelFile


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

    @property
    def parameter_size(self) -> str:
        """Human label like Ollama's: ``"494.03M"``, ``"8.0B"``."""
        n = self.parameter_count
        if n >= 1_000_000_000:
            return f"{n / 1e9:.1f}B"
        if n >= 1_000_000:
            return f"{n / 1e6:.2f}M"
        return f"{n / 1e3:.2f}K"


# -- limits -------------------------------------------------------------------
# Generous for every real model (the largest have ~2k tensors, ~60 keys, 256k
# tokens) while keeping a hostile header from costing memory or time.
GGUF_MAGIC = b"GGUF"
MAX_TENSORS = 1 << 16
MAX_KV = 1 << 16
MAX_STRING = 1 << 20
MAX_TEMPLATE = 16 << 20  # tokenizer.chat_template* may legitimately be long
MAX_ARRAY = 1 << 24
MAX_TENSOR_NAME = 256
MAX_DIMS = 4
MAX_LAYERS = 1 << 14
MAX_KEPT_BYTES = 64 << 20  # all strings kept in ``kv`` together
KEEP_NUMERIC_ARRAY = 1024  # per-layer head counts and the like
KEEP_STRING_ARRAY = 64
_CHUNK = 1 << 20

_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"), 1: struct.Struct("<b"), 2: struct.Struct("<H"),
    3: struct.Struct("<h"), 4: struct.Struct("<I"), 5: struct.Struct("<i"),
    6: struct.Struct("<f"), 7: struct.Struct("<?"), 10: struct.Struct("<Q"),
    11: struct.Struct("<q"), 12: struct.Struct("<d"),
}
_T_STRING, _T_ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_BLK_RE = re.compile(r"^blk\.(\d{1,6})\.")
# llama.cpp's expert-tensor pattern (llm_ffn_exps_block_regex), after the layer number.
_EXPS_RE = re.compile(r"ffn_(up|down|gate|gate_up)_(ch|)exps")


class _Reader:
    """Sequential reads through a bounded buffer, with precise truncation errors."""

    def __init__(self, fh: BinaryIO, size: int, where: str, start: int = 0) -> None:
        self.fh, self.size, self.where = fh, size, where
        fh.seek(start)
        self.base, self.buf, self.i = start, b"", 0

    @property
    def pos(self) -> int:
        return self.base + self.i

    @property
    def left(self) -> int:
        return self.size - self.pos

    def fail(self, what: str) -> InvalidModelFile:
        return InvalidModelFile(f"{self.where}: {what} (at byte {self.pos})")

    def take(self, n: int, what: str) -> bytes:
        if n > self.left:
            raise self.fail(f"file is truncated: {what} needs {n} bytes, {self.left} left")
        if self.i + n > len(self.buf):
            rest = self.buf[self.i:]
            self.base += self.i
            self.buf = rest + self.fh.read(max(n - len(rest), _CHUNK))
            self.i = 0
            if len(self.buf) < n:
                raise self.fail(f"file is truncated while reading {what}")
        out = self.buf[self.i:self.i + n]
        self.i += n
        return out

    def skip(self, n: int, what: str) -> None:
        if n > self.left:
            raise self.fail(f"file is truncated: {what} needs {n} bytes, {self.left} left")
        if self.i + n <= len(self.buf):
            self.i += n
            return
        target = self.pos + n
        self.fh.seek(target)
        self.base, self.buf, self.i = target, b"", 0

    def u32(self, what: str) -> int:
        return int(_U32.unpack(self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(_U64.unpack(self.take(8, what))[0])

    def string(self, what: str, cap: int = MAX_STRING) -> str:
        n = self.u64(f"length of {what}")
        if n > cap:
            raise self.fail(f"{what} is {n} bytes long, over the limit of {cap}")
        return self.take(n, what).decode("utf-8", "replace")

    def skip_string(self, what: str) -> None:
        n = self.u64(f"length of {what}")
        if n > MAX_STRING:
            raise self.fail(f"{what} is {n} bytes long, over the limit of {MAX_STRING}")
        self.skip(n, what)


@dataclass
class _Header:
    kv: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    array_offsets: dict[str, int] = field(default_factory=dict)  # string arrays not kept
    # name, elements, bytes, ggml type
    tensors: list[tuple[str, int, int, int]] = field(default_factory=list)
    file_size: int = 0


def _read_value(r: _Reader, key: str, vtype: int, budget: list[int], h: _Header) -> Any:
    if vtype in _SCALARS:
        st = _SCALARS[vtype]
        return st.unpack(r.take(st.size, f"value of {key}"))[0]
    if vtype == _T_STRING:
        cap = MAX_TEMPLATE if key.startswith("tokenizer.chat_template") else MAX_STRING
        value = r.string(f"value of {key}", cap)
        budget[0] -= len(value)
        if budget[0] < 0:
            raise r.fail("metadata strings exceed the total limit")
        return value
    if vtype != _T_ARRAY:
        raise r.fail(f"unknown value type {vtype} for key {key!r}")
    etype = r.u32(f"element type of {key}")
    count = r.u64(f"length of {key}")
    if count > MAX_ARRAY:
        raise r.fail(f"array {key!r} has {count} elements, over the limit of {MAX_ARRAY}")
    h.array_lengths[key] = count
    # The vocabulary, scores, types and merges are never kept, however short.
    keep = not key.startswith("tokenizer.ggml.")
    if etype in _SCALARS:
        st = _SCALARS[etype]
        if count > KEEP_NUMERIC_ARRAY or not keep:
            r.skip(count * st.size, f"array {key}")
            return None
        data = r.take(count * st.size, f"array {key}")
        return [v[0] for v in st.iter_unpack(data)]
    if etype != _T_STRING:
        raise r.fail(f"array {key!r} has unsupported element type {etype}")
    if count * 8 > r.left:
        raise r.fail(f"file is truncated: array {key!r} declares {count} strings")
    if count > KEEP_STRING_ARRAY or not keep:
        h.array_offsets[key] = r.pos
        for _ in range(count):
            r.skip_string(f"element of {key}")
        return None
    items = [r.string(f"element of {key}") for _ in range(count)]
    budget[0] -= sum(len(s) for s in items)
    if budget[0] < 0:
        raise r.fail("metadata strings exceed the total limit")
    return items


def _read_header(path: Path) -> _Header:
    where = f"{path.name}: not a valid GGUF file"
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InvalidModelFile(f"{path.name}: cannot open: {exc.strerror}") from None
    with fh:
        size = path.stat().st_size
        r = _Reader(fh, size, where)
        if fh.read(4) != GGUF_MAGIC:
            raise InvalidModelFile(f"{where}: missing GGUF magic")
        r = _Reader(fh, size, where, 4)
        version = r.u32("version")
        if version not in (2, 3):
            hint = " (big-endian files are not supported)" if version >= 1 << 16 else ""
            raise InvalidModelFile(f"{where}: unsupported GGUF version {version}{hint}")
        n_tensors, n_kv = r.u64("tensor count"), r.u64("key/value count")
        if n_tensors > MAX_TENSORS or n_tensors * 32 > r.left:
            raise r.fail(f"absurd tensor count {n_tensors}")
        if n_kv > MAX_KV or n_kv * 13 > r.left:
            raise r.fail(f"absurd key/value count {n_kv}")
        h = _Header(file_size=size)
        budget = [MAX_KEPT_BYTES]
        for _ in range(n_kv):
            key = r.string("key", 65536)
            if key in h.kv:
                raise r.fail(f"duplicate key {key!r}")
            h.kv[key] = _read_value(r, key, r.u32(f"type of {key}"), budget, h)
        alignment = h.kv.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment < 1 or alignment > 1 << 20 \
                or alignment & (alignment - 1):
            raise r.fail(f"invalid general.alignment {alignment!r}")
        _read_tensor_infos(r, n_tensors, alignment, h)
        if "tokenizer.ggml.tokens" in h.array_offsets:
            _pick_tokens(fh, size, where, h)
    return h


def _read_tensor_infos(r: _Reader, n: int, alignment: int, h: _Header) -> None:
    import gguf  # the package's tables: block sizes and type sizes

    spans: list[tuple[int, int, str]] = []
    names: set[str] = set()
    for _ in range(n):
        name = r.string("tensor name", MAX_TENSOR_NAME)
        if name in names:
            raise r.fail(f"duplicate tensor {name!r}")
        names.add(name)
        n_dims = r.u32(f"dimension count of {name}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(f"tensor {name!r} has {n_dims} dimensions")
        dims = [r.u64(f"dimension of {name}") for _ in range(n_dims)]
        elems = 1
        for d in dims:
            if d < 1 or d > 1 << 40:
                raise r.fail(f"tensor {name!r} has an invalid dimension {d}")
            elems *= d
        if elems > 1 << 48:
            raise r.fail(f"tensor {name!r} has too many elements")
        ttype = r.u32(f"type of {name}")
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise r.fail(f"tensor {name!r} has unknown type {ttype}") from None
        if dims[0] % block:
            raise r.fail(f"tensor {name!r}: row of {dims[0]} is not a multiple of {block}")
        nbytes = elems // block * type_size
        offset = r.u64(f"offset of {name}")
        if offset % alignment:
            raise r.fail(f"tensor {name!r} offset {offset} is not aligned to {alignment}")
        spans.append((offset, nbytes, name))
        h.tensors.append((name, elems, nbytes, ttype))
    data_start = -(-r.pos // alignment) * alignment
    data_size = r.size - data_start
    end = 0
    for offset, nbytes, name in sorted(spans):
        if offset + nbytes > data_size:
            raise InvalidModelFile(
                f"{r.where}: tensor {name!r} ({nbytes} bytes at data offset {offset}) "
                f"lies past the end of the file (truncated download?)")
        if offset < end:
            raise InvalidModelFile(f"{r.where}: tensor {name!r} overlaps another tensor")
        end = offset + nbytes


def _pick_tokens(fh: BinaryIO, size: int, where: str, h: _Header) -> None:
    """Fetch the few token strings we name (bos/eos/eot) from the skipped vocabulary."""
    wanted: dict[int, str] = {}
    for role in ("bos", "eos", "eot"):
        tid = h.kv.get(f"tokenizer.ggml.{role}_token_id")
        if isinstance(tid, int) and 0 <= tid < h.array_lengths["tokenizer.ggml.tokens"]:
            wanted[tid] = role
    if not wanted:
        return
    r = _Reader(fh, size, where, h.array_offsets["tokenizer.ggml.tokens"])
    for i in range(max(wanted) + 1):
        if i in wanted:
            h.kv[f"_token.{wanted[i]}"] = r.string("token")
        else:
            r.skip_string("token")


def _file_type_label(kv: dict[str, Any], tensors: Iterable[tuple[str, int, int, int]]) -> str:
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


def _build(headers: list[_Header]) -> ModelInfo:
    first = headers[0]
    kv = {k: v for k, v in first.kv.items() if not k.startswith("_token.")}
    arch = kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise InvalidModelFile("not a valid GGUF model: general.architecture is missing")

    def num(key: str, default: int = 0) -> int:
        return _as_max(kv.get(f"{arch}.{key}"), default)

    layers: dict[int, int] = {}
    experts: dict[int, int] = {}
    params = token_embd = output = other = 0
    has_output = False
    tensors = [t for h in headers for t in h.tensors]
    for name, elems, nbytes, _t in tensors:
        params += elems
        m = _BLK_RE.match(name)
        if m:
            idx = int(m.group(1))
            if idx >= MAX_LAYERS:
                raise InvalidModelFile(f"not a valid GGUF model: tensor {name!r} names layer {idx}")
            layers[idx] = layers.get(idx, 0) + nbytes
            if _EXPS_RE.match(name, m.end()):
                experts[idx] = experts.get(idx, 0) + nbytes
        elif name.startswith("token_embd."):
            token_embd += nbytes
        elif name.startswith(("output.", "output_norm.")):
            output += nbytes
            has_output = has_output or name.startswith("output.")
        else:
            other += nbytes
    if not has_output:
        output += token_embd  # tied embeddings: the output layer reuses token_embd
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
        parameter_count=params,
        n_layers=n_layers or count,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=num("attention.key_length", per_head),
        head_dim_v=num("attention.value_length", per_head),
        context_length=num("context_length"),
        n_vocab=tokens_len if tokens_len is not None else num("vocab_size"),
        layer_bytes=[layers.get(i, 0) for i in range(count)],
        output_bytes=output,
        token_embd_bytes=token_embd,
        file_size=sum(h.file_size for h in headers),
        chat_template=text("tokenizer.chat_template"),
        bos_token=text("_token.bos"),
        eos_token=text("_token.eos"),
        pooling_type=pooling if isinstance(pooling, int) else None,
        is_adapter=kv.get("general.type") == "adapter",
        kv=kv,
        eot_token=text("_token.eot"),
        other_bytes=other,
        array_lengths=dict(first.array_lengths),
        tensor_count=len(tensors),
        expert_bytes=[experts.get(i, 0) for i in range(count)] if experts else [],
    )


def read_model_info(path: str | Path) -> ModelInfo:
    """Read a GGUF's metadata; raises ``InvalidModelFile`` for anything malformed."""
    return _build([_read_header(Path(path))])


def read_model_info_split(paths: list[Path]) -> ModelInfo:
    """Read a split GGUF (``-00001-of-0000N``): metadata from the first shard, sizes summed."""
    if not paths:
        raise InvalidModelFile("a split model needs at least one file")
    headers = [_read_header(Path(p)) for p in paths]
    total = _as_max(headers[0].kv.get("split.count"), len(paths))
    if len(paths) > 1 and total != len(paths):
        raise InvalidModelFile(f"split model declares {total} files, {len(paths)} given")
    return _build(headers)
