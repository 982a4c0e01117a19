"""Framing of runner messages: round trips, size cap, malformed input."""

from __future__ import annotations

import asyncio
import io
import json
import struct

import pytest

from localllm.runner import protocol as P
from localllm.runner.messages import (
    CompletionRequest,
    Done,
    Failed,
    LoadOptions,
    PairFormat,
    Piece,
    SamplingParams,
)


def frames(*msgs: P.Message) -> io.BytesIO:
    return io.BytesIO(b"".join(P.encode(m) for m in msgs))


def one(stream: io.BytesIO) -> P.Message:
    msg = P.read_frame(stream)
    assert msg is not None
    return msg


def test_round_trip_all_kinds() -> None:
    req = CompletionRequest(
        id="r1",
        prompt=[1, 2, 3],
        stop=["\n"],
        num_predict=7,
        sampling=SamplingParams(temperature=0.0, seed=42, grammar="root ::= x"),
    )
    msgs = [
        P.load_msg(["/m/a.gguf"], LoadOptions(n_ctx=256, n_parallel=2, flash_attn="off")),
        P.complete_msg(req),
        P.event_msg(
            Piece(
                id="r1",
                text="héllo ✓",
                token=5,
                logprob=-0.25,
                top_logprobs=[("a", -0.1), ("b", -2.0)],
            )
        ),
        P.event_msg(Done(id="r1", reason="stop", prompt_tokens=3, context=[1, 2])),
        P.event_msg(Failed(id="r2", message="nope", status=400)),
        {"type": "embed", "id": "e1", "inputs": ["x"], "truncate": True},
        {"type": "shutdown"},
    ]
    stream = frames(*msgs)
    got = [one(stream) for _ in msgs]
    assert P.read_frame(stream) is None  # clean EOF between frames
    assert got == json.loads(json.dumps(msgs))
    assert P.parse_options(got[0]) == LoadOptions(n_ctx=256, n_parallel=2, flash_attn="off")
    assert P.parse_request(got[1]) == req
    piece = P.parse_piece(got[2])
    assert piece.text == "héllo ✓" and piece.top_logprobs == [("a", -0.1), ("b", -2.0)]
    assert P.parse_done(got[3]) == Done(id="r1", reason="stop", prompt_tokens=3, context=[1, 2])
    assert P.parse_failed(got[4]) == Failed(id="r2", message="nope", status=400)


def test_unknown_fields_are_ignored_and_defaults_fill_in() -> None:
    msg = {
        "type": "complete",
        "request": {
            "id": "x",
            "prompt": "hi",
            "future_field": 1,
            "sampling": {"top_k": 5, "new_knob": 2},
        },
    }
    req = P.parse_request(P.decode(json.dumps(msg).encode()))
    assert req.id == "x" and req.sampling.top_k == 5 and req.sampling.temperature == 0.8


def test_oversize_frame_rejected_both_ways() -> None:
    big = {
        "type": "tokenize",
        "id": "t",
        "text": "x" * 2000,
        "add_special": True,
        "parse_special": True,
    }
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.encode(big, max_frame=1000)
    # A header announcing more than the cap is refused before anything is allocated.
    stream = io.BytesIO(struct.pack(">I", P.MAX_FRAME + 1) + b"{}")
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.read_frame(stream)
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.read_frame(frames(big), max_frame=1000)


@pytest.mark.parametrize(
    "body, match",
    [
        (b"\xff\xfe garbage", "not UTF-8 JSON"),
        (b"{not json", "not UTF-8 JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"type": "format_disk"}', "unknown message type"),
        (b'{"no_type": 1}', "unknown message type"),
        (b'{"type": "cancel"}', "lacks id"),
        (b'{"type": "complete", "request": "hi"}', None),
    ],
)
def test_garbage_body_is_a_clean_error(body: bytes, match: str | None) -> None:
    stream = io.BytesIO(struct.pack(">I", len(body)) + body)
    with pytest.raises(P.ProtocolError, match=match):
        msg = P.read_frame(stream)
        assert msg is not None
        P.parse_request(msg)


def test_malformed_request_fields() -> None:
    with pytest.raises(P.ProtocolError, match="CompletionRequest"):
        P.parse_request({"type": "complete", "request": {"prompt": "no id"}})
    with pytest.raises(P.ProtocolError, match="prompt"):
        P.parse_request({"type": "complete", "request": {"id": "a", "prompt": 3}})


def test_truncated_streams() -> None:
    whole = P.encode({"type": "ping", "id": "p"})
    with pytest.raises(P.ProtocolError, match="inside a frame"):
        P.read_frame(io.BytesIO(whole[:2]))
    with pytest.raises(P.ProtocolError, match="inside a frame"):
        P.read_frame(io.BytesIO(whole[:-1]))


def test_non_finite_floats_survive() -> None:
    piece = Piece(id="p", text="x", logprob=float("-inf"), top_logprobs=[("y", float("-inf"))])
    got = P.parse_piece(one(io.BytesIO(P.encode(P.event_msg(piece)))))
    assert got == piece


def test_async_reader() -> None:
    async def go() -> list[P.Message | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(P.encode({"type": "pong", "id": "1"}) + P.encode({"type": "shutdown"}))
        reader.feed_eof()
        return [await P.read_frame_async(reader) for _ in range(3)]

    assert asyncio.run(go()) == [{"type": "pong", "id": "1"}, {"type": "shutdown"}, None]

    async def bad(data: bytes) -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        await P.read_frame_async(reader)

    with pytest.raises(P.ProtocolError):
        asyncio.run(bad(b"\x00\x00"))
    with pytest.raises(P.ProtocolError):
        asyncio.run(bad(struct.pack(">I", 10) + b"{}"))
    with pytest.raises(P.ProtocolError, match="exceeds"):
        asyncio.run(bad(b"\xff\xff\xff\xff"))


def test_rerank_round_trip_and_checks() -> None:
    fmt = PairFormat(template="<q>{query}<d>{document}", sep=3)
    docs = ["d" * 100_000, "é✓"]  # a long one travels as an attachment
    msg = one(frames({**P.rerank_msg("q?", docs, fmt, False), "id": "rerank-1"}))
    assert P.parse_rerank(msg) == ("q?", docs, fmt) and msg["truncate"] is False
    back = one(frames({"type": "scores", "id": "rerank-1", "scores": [0.5, -1.25], "n_tokens": 9}))
    assert back["scores"] == [0.5, -1.25]
    for bad in (
        {"query": 1},
        {"documents": ["a", 2]},
        {"format": {"template": 5}},
        {"format": "x"},
    ):
        with pytest.raises(P.ProtocolError):
            P.parse_rerank({**P.rerank_msg("q", ["a"], fmt, True), **bad})
