"""Large values of runner messages travel as raw attachments and come back whole."""

from __future__ import annotations

import asyncio
import io
import struct

import pytest

from localllm.runner import attach, protocol as P
from localllm.runner.attach import Floats


def roundtrip(msg: P.Message) -> P.Message:
    got = P.read_frame(io.BytesIO(P.encode(msg)))
    assert got is not None
    return got


def test_large_values_are_attached_and_small_ones_stay_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(attach, "SLICE", 1000)  # many chunks per value
    text = "é中😀x" * 20_000
    ids = list(range(-5, 70_000))
    msg = {
        "type": "embed",
        "id": "e",
        "truncate": True,
        "inputs": ["short", text, "also short"],
        "extra": {"ids": ids, "few": [1, 2]},
        "blob": b"\x00\xff" * 10,
    }
    parts = P.encode_parts(msg)
    assert len(parts) > 3 and len(parts[0]) < 1000  # the JSON is small
    assert roundtrip(msg) == msg


def test_floats_come_back_as_float32_rows() -> None:
    rows = [[0.5, -1.25, 3.0], [1e-3, 2.0, 7.5]]
    got = roundtrip({"type": "embeddings", "id": "e", "n_tokens": 3, "vectors": Floats.pack(rows)})
    vectors = got["vectors"]
    assert isinstance(vectors, Floats) and (vectors.rows, vectors.width) == (2, 3)
    assert vectors.tuples() == [(0.5, -1.25, 3.0), (pytest.approx(1e-3), 2.0, 7.5)]
    assert Floats.pack([]).tuples() == []


def test_the_async_reader_takes_attachments_too() -> None:
    msg = {"type": "tokens", "id": "t", "tokens": list(range(100_000))}

    async def go() -> P.Message | None:
        reader = asyncio.StreamReader()
        reader.feed_data(P.encode(msg))
        reader.feed_eof()
        return await P.read_frame_async(reader)

    assert asyncio.run(go()) == msg


@pytest.mark.parametrize("tamper", ["sizes", "ref", "kind", "shape"])
def test_inconsistent_attachments_break_the_stream(tamper: str) -> None:
    frame = bytearray(
        P.encode(
            {"type": "embeddings", "id": "e", "n_tokens": 1, "vectors": Floats.pack([[1.0, 2.0]])}
        )
    )
    (json_len,) = struct.unpack(">I", frame[4:8])
    text = bytes(frame[8 : 8 + json_len])
    text = {
        "sizes": text.replace(b"[8]", b"[9]"),
        "ref": text.replace(b'"\\u0000att":0', b'"\\u0000att":3'),
        "kind": text.replace(b'"k":"f"', b'"k":"z"'),
        "shape": text.replace(b'"rows":1', b'"rows":2'),
    }[tamper]
    assert len(text) == json_len or tamper == "sizes"
    body = struct.pack(">I", len(text)) + text + bytes(frame[8 + json_len :])
    bad = struct.pack(">I", len(body) | 1 << 31) + body
    with pytest.raises(P.ProtocolError):
        P.read_frame(io.BytesIO(bad))


def test_the_frame_cap_counts_attachments() -> None:
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.encode({"type": "ping", "id": "p", "data": b"x" * 2000}, max_frame=1000)
