"""Tests for localllm.compat.anthropic (request, response, stream, errors): Messages <-> native."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from localllm.api.schemas_infer import ChatRequest
from localllm.compat.anthropic.errors import anthropic_error, is_anthropic_path
from localllm.compat.anthropic.request import messages_request_to_native
from localllm.compat.anthropic.response import message_object
from localllm.compat.anthropic.stream import MessageStream
from localllm.compat.frames import sse
from localllm.errors import InvalidRequest, ServerBusy

BASE: dict[str, Any] = {
    "model": "qwen",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Hi"}],
}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
DONE = {"done": True, "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 7}


def conv(**extra: Any) -> Any:
    return messages_request_to_native({**BASE, **extra})


def test_minimal_request_is_a_valid_native_chat() -> None:
    c = conv()
    assert c.native == {
        "model": "qwen",
        "stream": False,
        "truncate": False,
        "messages": [{"role": "user", "content": "Hi"}],
        "options": {"num_predict": 64},
    }
    assert (c.stream, c.forced_tools) == (False, None)
    ChatRequest.model_validate(c.native)  # what the route validates it with


def test_sampling_stop_system_thinking_and_ignored_fields() -> None:
    c = conv(
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        stop_sequences=["END", "###"],
        stream=True,
        system=[
            {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Use French."},
        ],
        thinking={"type": "enabled", "budget_tokens": 2048},
        metadata={"user_id": "u1"},
        service_tier="auto",
    )
    assert c.native["options"] == {
        "num_predict": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END", "###"],
        "think_budget": 2048,
    }
    assert c.native["messages"][0] == {"role": "system", "content": "Be terse.\nUse French."}
    assert c.native["think"] is True and c.stream and c.native["stream"]
    assert "metadata" not in c.native
    assert conv(thinking={"type": "disabled"}).native["think"] is False


def test_blocks_images_tool_use_and_results_keep_order() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "need weather", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "21C"}, {"type": "text", "text": "sunny"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_x",
                    "content": "n/a",
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]
    native = conv(messages=messages).native["messages"]
    assert native == [
        {"role": "user", "content": "Look:", "images": [PNG]},
        {
            "role": "assistant",
            "content": "Checking.",
            "thinking": "need weather",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {
            "role": "tool",
            "content": "21C\nsunny",
            "tool_call_id": "toolu_1",
            "tool_name": "get_weather",
        },
        {"role": "tool", "content": "n/a", "tool_call_id": "toolu_x"},
        {"role": "user", "content": "Thanks"},
    ]
    ChatRequest.model_validate(conv(messages=messages).native)


@pytest.mark.parametrize(
    ("choice", "tools", "forced"),
    [
        (None, ["get_weather", "f"], False),
        ({"type": "auto"}, ["get_weather", "f"], False),
        ({"type": "any"}, ["get_weather", "f"], True),
        ({"type": "tool", "name": "f", "disable_parallel_tool_use": True}, ["f"], True),
        ({"type": "none"}, None, False),
    ],
)
def test_tools_and_tool_choice(choice: Any, tools: list[str] | None, forced: bool) -> None:
    other = {"name": "f", "input_schema": {"type": "object"}}
    extra: dict[str, Any] = {"tools": [WEATHER, other]}
    if choice is not None:
        extra["tool_choice"] = choice
    c = conv(**extra)
    got = c.native.get("tools")
    assert ([t["function"]["name"] for t in got] if got else None) == tools
    assert (c.forced_tools is not None) == forced
    if forced:
        assert c.forced_tools == got
    if tools and "get_weather" in tools:
        assert got[0] == {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city",
                "parameters": WEATHER["input_schema"],
            },
        }


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"max_tokens": None}, "max_tokens: field required"),
        ({"max_tokens": 0}, "max_tokens: must be >= 1"),
        ({"max_tokens": "8"}, "max_tokens: must be an integer"),
        ({"model": ""}, "model: field required"),
        ({"messages": []}, "messages: must be a non-empty array"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "content block type 'document' is not supported",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "not base64!",
                                },
                            }
                        ],
                    }
                ]
            },
            "not valid base64",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "url", "url": "https://example.com/a.png"},
                            }
                        ],
                    }
                ]
            },
            "only base64 image sources",
        ),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "image", "source": {}}]}]},
            "messages.0.content.0",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "tool_use_id"),
        ({"temperature": "hot"}, "temperature: must be a number"),
        ({"top_k": 1.5}, "top_k: must be an integer"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"stream": "yes"}, "stream: must be a boolean"),
        ({"system": [{"type": "image"}]}, "system.0"),
        ({"thinking": {"type": "sometimes"}}, "thinking: type"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"thinking": {"type": "adaptive", "display": "hidden"}}, "thinking.display"),
        ({"context_management": {"edits": {}}}, "context_management.edits"),
        (
            {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": 2}]}},
            "context_management.edits.0.keep",
        ),
        ({"output_config": {"format": {"type": "xml"}}}, "output_config.format"),
        ({"tools": [{"name": "f"}]}, "input_schema"),
        ({"tool_choice": {"type": "any"}}, '"any" needs tools'),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "'nope'"),
    ],
)
def test_bad_requests_say_what_is_wrong(extra: dict[str, Any], needle: str) -> None:
    body = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(InvalidRequest) as err:
        messages_request_to_native(body)
    assert needle in err.value.message


def test_count_tokens_body_needs_no_max_tokens_and_never_streams() -> None:
    body = {"model": "qwen", "messages": BASE["messages"], "stream": True}
    c = messages_request_to_native(body, count_only=True)
    assert not c.stream and c.native["options"] == {}
    with pytest.raises(InvalidRequest):
        messages_request_to_native([body], count_only=True)


def test_message_object_text_thinking_and_usage() -> None:
    native = {"message": {"role": "assistant", "content": "Bonjour", "thinking": "hmm"}, **DONE}
    out = message_object(native, model="qwen", id="msg_1")
    assert out == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "qwen",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": ""},
            {"type": "text", "text": "Bonjour"},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "output_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    length = message_object({**native, "done_reason": "length"}, model="qwen")
    assert length["stop_reason"] == "max_tokens" and length["id"].startswith("msg_")
    # What the prompt cache served is counted apart from input_tokens, as Anthropic does.
    cached = message_object({**native, "prompt_cached_count": 9}, model="qwen")
    assert cached["usage"] == {
        "input_tokens": 3,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 9,
    }


def test_message_object_tool_use() -> None:
    calls = [
        {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "call_7", "function": {"name": "f", "arguments": '{"a": 1}'}},
    ]
    out = message_object({"message": {"content": "", "tool_calls": calls}, **DONE}, model="m")
    assert out["stop_reason"] == "tool_use"
    first, second = out["content"]
    assert first["type"] == "tool_use" and first["id"].startswith("toolu_")
    assert (first["name"], first["input"]) == ("get_weather", {"city": "Paris"})
    assert second == {"type": "tool_use", "id": "call_7", "name": "f", "input": {"a": 1}}


def parse(frames: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each SSE frame."""
    out = []
    for frame in frames:
        head, data, rest = frame.split("\n", 2)
        assert head.startswith("event: ") and data.startswith("data: ") and rest == "\n"
        out.append((head[len("event: ") :], json.loads(data[len("data: ") :])))
    return out


def _stream(chunks: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    s = MessageStream("qwen", id="msg_9")
    frames = s.start()
    for chunk in chunks:
        frames += s.feed(chunk)
    frames += s.end()
    return parse(frames)


def test_stream_event_sequence_text_then_thinking_then_tool() -> None:
    call = {"id": "toolu_1", "function": {"name": "get_weather", "arguments": {"city": "Nice"}}}
    events = _stream(
        [
            {"message": {"content": "", "thinking": "let me"}, "done": False},
            {"message": {"content": "", "thinking": " think"}, "done": False},
            {"message": {"content": "Hi"}, "done": False},
            {"message": {"content": " there"}, "done": False},
            {"message": {"content": "", "tool_calls": [call]}, **DONE},
        ]
    )
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert (start["id"], start["content"], start["stop_reason"]) == ("msg_9", [], None)
    blocks = [d for n, d in events if n == "content_block_start"]
    assert [b["index"] for b in blocks] == [0, 1, 2]
    assert blocks[2]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "get_weather",
        "input": {},
    }
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert deltas[0] == {"type": "thinking_delta", "thinking": "let me"}
    assert deltas[2] == {"type": "text_delta", "text": "Hi"}
    assert json.loads(deltas[4]["partial_json"]) == {"city": "Nice"}
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0, 1, 2]
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {
            "input_tokens": 12,
            "output_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def test_stream_empty_reply_and_error_chunk() -> None:
    events = _stream([{"message": {"content": ""}, **DONE, "done_reason": "length"}])
    assert [n for n, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]
    assert events[2][1]["delta"]["stop_reason"] == "max_tokens"
    (error,) = parse(MessageStream("m").feed({"error": "runner crashed"}))
    assert error == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": "runner crashed"}},
    )
    (busy,) = parse(MessageStream("m").fail(ServerBusy("busy")))
    assert busy == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    )
    (hidden,) = parse(MessageStream("m").fail(RuntimeError("/home/me/secret")))
    assert hidden[1]["error"] == {"type": "api_error", "message": "internal error"}


@pytest.mark.parametrize(
    ("status", "out", "kind"),
    [
        (400, 400, "invalid_request_error"),
        (401, 401, "authentication_error"),
        (403, 403, "permission_error"),
        (404, 404, "not_found_error"),
        (413, 413, "request_too_large"),
        (422, 422, "invalid_request_error"),
        (500, 500, "api_error"),
        (503, 529, "overloaded_error"),
    ],
)
def test_errors_in_anthropic_shape(status: int, out: int, kind: str) -> None:
    assert anthropic_error(status, "why") == (
        out,
        {"type": "error", "error": {"type": kind, "message": "why"}},
    )


def test_paths_and_sse_frames() -> None:
    assert is_anthropic_path("/v1/messages") and is_anthropic_path("/v1/messages/count_tokens")
    assert not is_anthropic_path("/v1/messagesx") and not is_anthropic_path("/v1/models")
    assert sse({"type": "ping"}, "ping") == 'event: ping\ndata: {"type":"ping"}\n\n'
