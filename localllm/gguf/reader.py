"""The GGUF header reader: key/values and tensor descriptors, with strict limits.

The reader walks the file through a small buffer: it never maps the file and
never trusts a count or a length before checking it against a cap and against
the bytes actually left in the file, so a hostile header is refused in
milliseconds with bounded memory (``InvalidModelFile``).  Long arrays (the
vocabulary, merges) are counted and skipped, not kept: ``kv`` holds scalars and
short arrays; only the texts of the BOS/EOS/EOT tokens are fetched from the
vocabulary (``iter_string_array`` walks a whole one, for the draft model's
vocabulary check).  ``gguf.info`` turns headers into ``ModelInfo``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from localllm.errors import InvalidModelFile

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
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<?"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}
_T_STRING, _T_ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
BLK_RE = re.compile(r"^blk\.(\d{1,6})\.")
# llama.cpp's expert-tensor pattern (llm_ffn_exps_block_regex), after the layer number.
EXPS_RE = re.compile(r"ffn_(up|down|gate|gate_up)_(ch|)exps")


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
            rest = self.buf[self.i :]
            self.base += self.i
            self.buf = rest + self.fh.read(max(n - len(rest), _CHUNK))
            self.i = 0
            if len(self.buf) < n:
                raise self.fail(f"file is truncated while reading {what}")
        out = self.buf[self.i : self.i + n]
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

    def skip_strings(self, count: int, what: str) -> None:
        """Skip ``count`` strings: ``skip_string`` with the checks, minus its per-string cost.

        A vocabulary is 150k-260k strings and is walked on every header read:
        lengths are read in place from the buffer, and anything unusual (a
        length over the cap, the buffer's end) goes through ``skip_string``,
        which names the fault.
        """
        unpack, done = _U64.unpack_from, 0
        while done < count:
            buf, i, end = self.buf, self.i, len(self.buf) - 8
            limit = min(self.size - self.base, len(buf))  # the file may end inside the buffer
            while done < count and i <= end:
                n = unpack(buf, i)[0]
                if n > MAX_STRING or i + 8 + n > limit:
                    break
                i += 8 + n
                done += 1
            self.i = i
            if done < count:
                self.skip_string(what)  # refills the buffer, or raises the precise error
                done += 1


@dataclass
class Header:
    kv: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    array_offsets: dict[str, int] = field(default_factory=dict)  # string arrays not kept
    # name, elements, bytes, ggml type
    tensors: list[tuple[str, int, int, int]] = field(default_factory=list)
    # each tensor's dimensions and data offset, in the order of ``tensors``
    layout: list[tuple[tuple[int, ...], int]] = field(default_factory=list)
    file_size: int = 0


def _read_value(r: _Reader, key: str, vtype: int, budget: list[int], h: Header) -> Any:
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
        r.skip_strings(count, f"element of {key}")
        return None
    items = [r.string(f"element of {key}") for _ in range(count)]
    budget[0] -= sum(len(s) for s in items)
    if budget[0] < 0:
        raise r.fail("metadata strings exceed the total limit")
    return items


def read_header(path: Path) -> Header:
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InvalidModelFile(f"{path.name}: cannot open: {exc.strerror}") from None
    with fh:
        return read_header_from(fh, path.stat().st_size, path.name)


def read_header_from(fh: BinaryIO, size: int, name: str) -> Header:
    """The header of the GGUF ``fh`` (``size`` bytes, called ``name`` in errors).

    ``fh`` needs only ``seek`` and ``read``: a local file, or a remote one read
    with HTTP range requests (store/remote.py); the same limits apply to both.
    """
    where = f"{name}: not a valid GGUF file"
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
    h = Header(file_size=size)
    budget = [MAX_KEPT_BYTES]
    for _ in range(n_kv):
        key = r.string("key", 65536)
        if key in h.kv:
            raise r.fail(f"duplicate key {key!r}")
        h.kv[key] = _read_value(r, key, r.u32(f"type of {key}"), budget, h)
    alignment = h.kv.get("general.alignment", 32)
    if (
        not isinstance(alignment, int)
        or alignment < 1
        or alignment > 1 << 20
        or alignment & (alignment - 1)
    ):
        raise r.fail(f"invalid general.alignment {alignment!r}")
    _read_tensor_infos(r, n_tensors, alignment, h)
    if "tokenizer.ggml.tokens" in h.array_offsets:
        _pick_tokens(fh, size, where, h)
    return h


def _read_tensor_infos(r: _Reader, n: int, alignment: int, h: Header) -> None:
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
        h.layout.append((tuple(dims), offset))
    data_start = -(-r.pos // alignment) * alignment
    data_size = r.size - data_start
    end = 0
    for offset, nbytes, name in sorted(spans):
        if offset + nbytes > data_size:
            raise InvalidModelFile(
                f"{r.where}: tensor {name!r} ({nbytes} bytes at data offset {offset}) "
                f"lies past the end of the file (truncated download?)"
            )
        if offset < end:
            raise InvalidModelFile(f"{r.where}: tensor {name!r} overlaps another tensor")
        end = offset + nbytes


def _pick_tokens(fh: BinaryIO, size: int, where: str, h: Header) -> None:
    """Fetch the few token strings we name (bos/eos/eot) from the skipped vocabulary."""
    # One id may play several roles (Mistral-Nemo's BOS is its EOS too): each keeps its text.
    wanted: dict[int, list[str]] = {}
    for role in ("bos", "eos", "eot"):
        tid = h.kv.get(f"tokenizer.ggml.{role}_token_id")
        if isinstance(tid, int) and 0 <= tid < h.array_lengths["tokenizer.ggml.tokens"]:
            wanted.setdefault(tid, []).append(role)
    if not wanted:
        return
    r = _Reader(fh, size, where, h.array_offsets["tokenizer.ggml.tokens"])
    at = 0
    for i in sorted(wanted):
        r.skip_strings(i - at, "token")
        text = r.string("token")
        for role in wanted[i]:
            h.kv[f"_token.{role}"] = text
        at = i + 1


def iter_string_array(path: Path, h: Header, key: str) -> Iterator[str]:
    """The strings of the long array ``key`` of ``path``'s header ``h``, one at a time.

    The header reader skips such arrays (the vocabulary); this walks one again
    through the bounded buffer, so comparing two vocabularies never holds either.
    """
    offset = h.array_offsets.get(key)
    if offset is None:
        return
    where = f"{path.name}: not a valid GGUF file"
    with open(path, "rb") as fh:
        r = _Reader(fh, h.file_size, where, offset)
        for _ in range(h.array_lengths[key]):
            yield r.string(f"element of {key}")
