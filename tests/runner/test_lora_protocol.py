"""The protocol's LoRA parts: adapters ride on the request, loads are reported back."""

from __future__ import annotations

import io
import json

import pytest

from localllm.runner import protocol as P
from localllm.runner.messages import CompletionRequest


def test_request_adapters_round_trip_and_default_to_none() -> None:
    req = CompletionRequest(id="r", prompt="a", adapters=["/blobs/sha256-aa", "/b/x.gguf"])
    body = P.encode(P.complete_msg(req))
    got = P.read_frame(io.BytesIO(body))
    assert got is not None and P.parse_request(got) == req
    bare = P.parse_request({"type": "complete", "request": {"id": "r", "prompt": "a"}})
    assert bare.adapters == []


@pytest.mark.parametrize("bad", ["/one/path.gguf", [1], {"a": "b"}, None])
def test_malformed_adapters_are_refused(bad: object) -> None:
    with pytest.raises(P.ProtocolError, match="adapters"):
        P.parse_request(
            {"type": "complete", "request": {"id": "r", "prompt": "a", "adapters": bad}}
        )


def test_adapter_report_message() -> None:
    msg = P.adapter_msg("/blobs/sha256-aa", 1234)
    assert P.decode(json.dumps(msg).encode()) == {
        "type": "adapter",
        "path": "/blobs/sha256-aa",
        "load_ns": 1234,
    }
    with pytest.raises(P.ProtocolError, match="load_ns"):
        P.encode({"type": "adapter", "path": "x"})
