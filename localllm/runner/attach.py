"""Large values of a runner message carried as raw bytes after its JSON, not inside it.

``json.dumps`` of a 60 MB prompt holds the interpreter lock for 155 ms, and base64
plus JSON for a request's 48 MiB of images longer still: on the daemon's side
that is the event loop stalled.  So ``split`` takes out of a message every bytes
value, every string over ``MIN_SIZE`` characters, every list of over ``MIN_SIZE``
integers and every ``Floats`` block, leaving a small reference
(``{"\\u0000att": index, "k": kind}``) in their place, and returns them as lists
of byte chunks, each produced by a C call over at most ``SLICE`` of the value.
``join`` puts them back on the other side.  Kinds: ``b`` bytes, ``s`` UTF-8
text, ``i`` int64 array, ``f`` float32 rows (``Floats``).
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_SIZE = 64 << 10
SLICE = 1 << 20
REF = "\u0000att"  # no key of a runner message starts with NUL


@dataclass
class Floats:
    """Rows of float32 numbers as one block (embedding vectors): ``rows`` x ``width``."""

    data: bytes
    rows: int
    width: int

    @classmethod
    def pack(cls, rows: Sequence[Sequence[float]]) -> Floats:
        width = len(rows[0]) if rows else 0
        block = array.array("f")
        for row in rows:
            if len(row) != width:
                raise ValueError("rows of different widths")
            block.extend(row)
        return cls(_little(block).tobytes(), len(rows), width)

    def tuples(self) -> list[tuple[float, ...]]:
        """Every row as a tuple of Python floats, one short C call per row.  Tuples, not
        lists: the collector stops tracking a tuple of floats after one look, while every
        full pass would walk each float of a list (7M floats: ~100 ms a pass)."""
        unpack = struct.Struct(f"<{self.width}f").unpack_from
        return (
            [unpack(self.data, i * self.width * 4) for i in range(self.rows)]
            if self.width
            else [() for _ in range(self.rows)]
        )


def _little(block: array.array[Any]) -> array.array[Any]:
    if sys.byteorder == "big":
        block.byteswap()
    return block


def _text_chunks(text: str) -> list[bytes]:
    return [text[i : i + SLICE].encode("utf-8") for i in range(0, len(text), SLICE)]


def _int_chunks(values: list[Any]) -> list[bytes] | None:
    out: list[bytes] = []
    for i in range(0, len(values), SLICE // 8):
        part = values[i : i + SLICE // 8]
        try:
            out.append(_little(array.array("q", part)).tobytes())
        except (TypeError, OverflowError):  # not all integers: stays JSON
            return None
    return out


def split(msg: Mapping[str, object]) -> tuple[dict[str, object], list[list[bytes]]]:
    """``msg`` with its large values replaced by references, and those values' bytes."""
    parts: list[list[bytes]] = []

    def ref(kind: str, chunks: list[bytes], **extra: int) -> dict[str, object]:
        parts.append(chunks)
        return {REF: len(parts) - 1, "k": kind, **extra}

    def walk(value: object) -> object:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return ref("b", [bytes(value)])
        if isinstance(value, Floats):
            return ref("f", [value.data], rows=value.rows, width=value.width)
        if isinstance(value, str):
            return ref("s", _text_chunks(value)) if len(value) > MIN_SIZE else value
        if isinstance(value, list):
            if value and isinstance(value[0], (int, float)):
                # Numbers (token ids, logprobs): nothing inside to take out.
                if len(value) > MIN_SIZE and isinstance(value[0], int):
                    chunks = _int_chunks(value)
                    if chunks is not None:
                        return ref("i", chunks)
                return value
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    out = walk(msg)
    assert isinstance(out, dict)
    return out, parts


def join(msg: Mapping[str, object], blobs: Sequence[memoryview]) -> dict[str, object]:
    """``msg`` with its references replaced by the values ``blobs`` carry."""

    def value(ref: Mapping[str, object]) -> object:
        index, kind = ref[REF], ref.get("k")
        if not isinstance(index, int) or not 0 <= index < len(blobs):
            raise ValueError(f"attachment {index!r} does not exist")
        blob = blobs[index]
        if kind == "b":
            return bytes(blob)
        if kind == "s":
            return str(blob, "utf-8")
        if kind == "i":
            block = array.array("q")
            block.frombytes(blob)
            return _little(block).tolist()
        if kind == "f":
            rows, width = ref.get("rows"), ref.get("width")
            if (
                not isinstance(rows, int)
                or not isinstance(width, int)
                or rows * width * 4 != len(blob)
            ):
                raise ValueError("float attachment does not match its shape")
            return Floats(bytes(blob), rows, width)
        raise ValueError(f"unknown attachment kind {kind!r}")

    def walk(v: object) -> object:
        if isinstance(v, dict):
            if REF in v:
                return value(v)
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    out = walk(msg)
    assert isinstance(out, dict)
    return out
