"""Tests for localllm.compat.openai (request, response, errors) and compat.frames:
OpenAI requests -> native requests, errors, models, SSE frames."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from localllm.compat.frames import new_id, sse
from localllm.compat.openai.errors import error_body, error_from_exception, error_type
from localllm.compat.openai.request import (
    chat_request_to_native,
    completion_request_to_native,
    embedding_request_to_native,
)
from localllm.compat.openai.response import embeddings_response, models_list
from localllm.compat.openai.stream import SSE_DONE
from localllm.errors import InvalidRequest, ModelNotFound, ServerBusy

BASE = {"model": "llama3.2", "messages": [{"role": "user", "content": "Hi"}]}


def chat(**extra: Any) -> Any:
    return chat_request_to_native({**BASE, **extra})


def test_minimal_chat() -> None:
    conv = chat()
    assert conv.native == {
        "model": "llama3.2",
        "stream": False,
        "messages": [{"role": "user", "content": "Hi"}],
        "options": {"temperature": 1.0, "top_p": 1.0},
    }
    assert (conv.n, conv.stream, conv.include_usage, conv.tool_choice) == (1, False, False, "auto")


@pytest.mark.parametrize(
    ("extra", "options"),
    [
        ({"max_tokens": 50}, {"num_predict": 50}),
        ({"max_completion_tokens": 20, "max_tokens": 50}, {"num_predict": 20}),
        ({"temperature": 0.2, "top_p": 0.5}, {"temperature": 0.2, "top_p": 0.5}),
        ({"stop": "\n"}, {"stop": ["\n"]}),
        ({"stop": ["a", "b"]}, {"stop": ["a", "b"]}),
        ({"seed": 7}, {"seed": 7}),
        (
            {"frequency_penalty": 0.5, "presence_penalty": -1},
            {"frequency_penalty": 0.5, "presence_penalty": -1.0},
        ),
        ({"options": {"num_ctx": 8192, "temperature": 0.1}}, {"num_ctx": 8192, "temperature": 0.1}),
        ({"options": {"temperature": 0.1}, "temperature": 0.3}, {"temperature": 0.3}),
    ],
)
def test_sampling_fields(extra: dict[str, Any], options: dict[str, Any]) -> None:
    expected = {"temperature": 1.0, "top_p": 1.0, **options}
    assert chat(**extra).native["options"] == expected


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"temperature": "hot"}, "temperature must be a number"),
        ({"max_tokens": 1.5}, "max_tokens must be an integer"),
        ({"max_tokens": -1}, "max_tokens must be >= 0"),
        ({"stop": 3}, "stop must be a string"),
        ({"n": 0}, "n must be >= 1"),
        ({"n": 1000}, "n must be at most"),
        ({"stream": "yes"}, "stream must be a boolean"),
        ({"options": [1]}, "options must be an object"),
        ({"model": ""}, "model is required"),
        ({"messages": "hi"}, "messages must be an array"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "invalid message role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "image_url.url must be a string",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "'input_audio' is not supported",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "invalid content part"),
        ({"response_format": {"type": "xml"}}, "invalid response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {}}},
            "schema must be an object",
        ),
        ({"tool_choice": "required"}, "needs tools"),
        ({"tool_choice": {"type": "function", "function": {"name": "x"}}}, "not in tools"),
        ({"reasoning_effort": "extreme"}, "invalid reasoning effort"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be between 0 and 20"),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{bad"},
                            }
                        ],
                    }
                ]
            },
            "invalid tool call arguments",
        ),
    ],
)
def test_chat_request_errors(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as info:
        chat(**extra)
    assert info.value.status == 400


def test_messages_conversion() -> None:
    conv = chat(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What's the weather"},
                    {"type": "text", "text": "in Paris?"},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "Use the tool.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city": "Paris", "a": 1}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "22C"},
        ]
    )
    assert conv.native["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What's the weather\nin Paris?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "Use the tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "function": {
                        "index": 0,
                        "name": "get_weather",
                        "arguments": {"city": "Paris", "a": 1},
                    },
                }
            ],
        },
        {"role": "tool", "content": "22C", "tool_call_id": "call_1", "tool_name": "get_weather"},
    ]
    args = conv.native["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert list(args) == ["city", "a"]


@pytest.mark.parametrize(
    ("rf", "fmt"),
    [
        ({"type": "json_object"}, "json"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
            {"type": "object"},
        ),
        ({"type": "text"}, None),
    ],
)
def test_response_format(rf: dict[str, Any], fmt: Any) -> None:
    assert chat(response_format=rf).native.get("format") == fmt


TOOLS = [
    {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}},
]


@pytest.mark.parametrize(
    ("choice", "names", "mode", "forced"),
    [
        (None, ["a", "b"], "auto", None),
        ("auto", ["a", "b"], "auto", None),
        ("none", None, "none", None),
        ("required", ["a", "b"], "required", None),
        ({"type": "function", "function": {"name": "b"}}, ["b"], "required", "b"),
    ],
)
def test_tool_choice(choice: Any, names: list[str] | None, mode: str, forced: str | None) -> None:
    extra: dict[str, Any] = {"tools": TOOLS}
    if choice is not None:
        extra["tool_choice"] = choice
    conv = chat(**extra)
    got = conv.native.get("tools")
    assert ([t["function"]["name"] for t in got] if got else None) == names
    assert (conv.tool_choice, conv.forced_tool) == (mode, forced)
    # The forced-tool decision: every tool kept, when the model must call one.
    assert conv.forced_tools == (got if mode == "required" else None)


@pytest.mark.parametrize(
    ("extra", "think"),
    [
        ({"reasoning_effort": "none"}, False),
        ({"reasoning_effort": "high"}, "high"),
        ({"reasoning": {"effort": "low"}}, "low"),
        ({}, None),
    ],
)
def test_reasoning_effort(extra: dict[str, Any], think: Any) -> None:
    assert chat(**extra).native.get("think") == think


def test_stream_n_logprobs() -> None:
    conv = chat(
        stream=True, stream_options={"include_usage": True}, n=3, logprobs=True, top_logprobs=5
    )
    assert (conv.stream, conv.include_usage, conv.n) == (True, True, 3)
    assert conv.native["stream"] is True
    assert (conv.native["logprobs"], conv.native["top_logprobs"]) == (True, 5)
    assert chat(stream_options={"include_usage": True}).include_usage is False


def test_completion_request() -> None:
    conv = completion_request_to_native(
        {
            "model": "m",
            "prompt": "Once",
            "suffix": "end",
            "max_tokens": 5,
            "stream": True,
            "logprobs": 2,
            "echo": True,
        }
    )
    assert conv.native == {
        "model": "m",
        "prompt": "Once",
        "suffix": "end",
        "stream": True,
        "options": {"temperature": 1.0, "top_p": 1.0, "num_predict": 5},
        "logprobs": True,
        "top_logprobs": 2,
    }
    assert conv.echo and conv.stream
    assert completion_request_to_native({"model": "m", "prompt": ["x"]}).native["prompt"] == "x"
    with pytest.raises(InvalidRequest, match="prompt must be a string"):
        completion_request_to_native({"model": "m", "prompt": ["x", "y"]})


def test_embeddings_request_and_response() -> None:
    native, enc = embedding_request_to_native({"model": "e", "input": "hello", "dimensions": 2})
    assert native == {"model": "e", "input": ["hello"], "dimensions": 2} and enc == "float"
    for bad in (
        {"model": "e", "input": [[1, 2]]},
        {"model": "e", "input": "x", "encoding_format": "hex"},
    ):
        with pytest.raises(InvalidRequest):
            embedding_request_to_native(bad)
    out = embeddings_response(
        {"embeddings": [[0.5, -1.0], [0.0, 1.0]], "prompt_eval_count": 4}, "e"
    )
    assert out == {
        "object": "list",
        "model": "e",
        "data": [
            {"object": "embedding", "embedding": [0.5, -1.0], "index": 0},
            {"object": "embedding", "embedding": [0.0, 1.0], "index": 1},
        ],
        "usage": {"prompt_tokens": 4, "total_tokens": 4},
    }
    b64 = embeddings_response({"embeddings": [[0.5, -1.0]]}, "e", "base64")
    raw = base64.b64decode(b64["data"][0]["embedding"])
    assert struct.unpack("<2f", raw) == (0.5, -1.0)


def test_models_list() -> None:
    out = models_list(
        [
            {"name": "llama3.2:latest", "modified_at": "2024-05-01T10:00:00.123456789Z"},
            {
                "name": "hf.co/bartowski/Qwen-GGUF:Q4_K_M",
                "modified_at": "2024-05-01T12:00:00+02:00",
            },
            {"name": "me/mymodel:v1", "modified_at": ""},
        ]
    )
    assert out == {
        "object": "list",
        "data": [
            {
                "id": "llama3.2:latest",
                "object": "model",
                "created": 1714557600,
                "owned_by": "library",
            },
            {
                "id": "hf.co/bartowski/Qwen-GGUF:Q4_K_M",
                "object": "model",
                "created": 1714557600,
                "owned_by": "bartowski",
            },
            {"id": "me/mymodel:v1", "object": "model", "created": 0, "owned_by": "me"},
        ],
    }


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (InvalidRequest("bad"), 400, "invalid_request_error"),
        (ModelNotFound("model 'x' not found"), 404, "not_found_error"),
        (ServerBusy("busy"), 503, "api_error"),
        (RuntimeError("secret detail"), 500, "api_error"),
    ],
)
def test_errors(exc: BaseException, status: int, kind: str) -> None:
    got_status, body = error_from_exception(exc)
    assert got_status == status
    assert body["error"]["type"] == kind
    assert body["error"]["param"] is None and body["error"]["code"] is None
    assert "secret" not in body["error"]["message"]
    assert error_body(404, "m") == {
        "error": {"message": "m", "type": "not_found_error", "param": None, "code": None}
    }


def test_sse_frames() -> None:
    assert sse({"a": "é"}) == 'data: {"a":"é"}\n\n'
    assert json.loads(sse([1])[6:]) == [1]
    assert SSE_DONE == "data: [DONE]\n\n"
    assert sse({"type": "ping"}, "ping") == 'event: ping\ndata: {"type":"ping"}\n\n'


def test_ids() -> None:
    for prefix in ("chatcmpl-", "msg_", "resp_", ""):
        ident = new_id(prefix)
        assert ident.startswith(prefix) and len(ident) == len(prefix) + 24
        int(ident[len(prefix) :], 16)
    assert new_id("x") != new_id("x")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (405, "invalid_request_error"),
        (413, "invalid_request_error"),
        (500, "api_error"),
        (503, "api_error"),
    ],
)
def test_error_type_follows_the_status(status: int, kind: str) -> None:
    assert error_type(status) == kind
