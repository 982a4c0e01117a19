"""Tests for localllm.compat.openai.response and .stream: chat.completion(.chunk), completions."""

from __future__ import annotations

import json
from typing import Any

from localllm.compat.openai.response import chat_completion, text_completion
from localllm.compat.openai.stream import SSE_DONE, ChatStream, CompletionStream
from localllm.errors import ServerBusy

DONE = {"done": True, "done_reason": "stop", "prompt_eval_count": 10, "eval_count": 5}


def test_chat_completion_plain() -> None:
    native = {"message": {"role": "assistant", "content": "Hello!"}, **DONE}
    out = chat_completion([native], model="m", id="chatcmpl-1", created=123)
    assert out == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 123,
        "model": "m",
        "system_fingerprint": "fp_ollama",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def test_usage_says_how_much_of_the_prompt_the_cache_held() -> None:
    native = {"message": {"content": "Hi"}, **DONE, "prompt_cached_count": 8}
    out = chat_completion([native, {**native, "prompt_cached_count": 0}], model="m")
    assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}  # the prompt's, once
    s = ChatStream("m", include_usage=True)
    chunks = feed_all(s, [native])
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}


def test_chat_completion_tool_calls_thinking_and_n() -> None:
    first = {
        "message": {
            "content": "",
            "thinking": "hmm",
            "tool_calls": [
                {"function": {"index": 0, "name": "f", "arguments": {"b": 1, "a": "é"}}}
            ],
        },
        **DONE,
    }
    second = {
        "message": {"content": "cut"},
        "done": True,
        "done_reason": "length",
        "prompt_eval_count": 10,
        "eval_count": 7,
    }
    out = chat_completion([first, second], model="m")
    assert out["id"].startswith("chatcmpl-") and isinstance(out["created"], int)
    c0, c1 = out["choices"]
    assert c0["finish_reason"] == "tool_calls" and c0["message"]["reasoning"] == "hmm"
    call = c0["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "f", "arguments": '{"b": 1, "a": "é"}'}
    assert (c1["index"], c1["finish_reason"], c1["message"]["content"]) == (1, "length", "cut")
    assert out["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 12,
        "total_tokens": 22,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_chat_completion_logprobs() -> None:
    native = {
        "message": {"content": "Hi"},
        **DONE,
        "logprobs": [
            {"token": "Hi", "logprob": -0.5, "top_logprobs": [{"token": "Hi", "logprob": -0.5}]}
        ],
    }
    lp = chat_completion([native], model="m")["choices"][0]["logprobs"]
    assert lp == {
        "content": [
            {
                "token": "Hi",
                "logprob": -0.5,
                "bytes": [72, 105],
                "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}],
            }
        ]
    }


def parse(frames: list[str]) -> list[Any]:
    """The objects of SSE frames without an ``event:`` line, as OpenAI sends them."""
    assert all(f.startswith("data: ") and f.endswith("\n\n") for f in frames)
    return [json.loads(f[len("data: ") :]) for f in frames]


def feed_all(stream: Any, natives: list[dict[str, Any]], index: int = 0) -> list[dict[str, Any]]:
    """The chunks of a whole stream of choice ``index``, without the closing [DONE]."""
    frames = stream.start()
    for n in natives:
        frames += stream.feed((index, n))
    frames += stream.end()
    assert frames[-1] == SSE_DONE
    return parse(frames[:-1])


def test_chat_stream_shape() -> None:
    s = ChatStream("m", id="chatcmpl-x", created=5, include_usage=True)
    chunks = feed_all(
        s,
        [
            {"message": {"role": "assistant", "content": "Hel"}, "done": False},
            {"message": {"role": "assistant", "content": ""}, "done": False},  # nothing to send
            {"message": {"role": "assistant", "content": "lo", "thinking": ""}, "done": False},
            {"message": {"role": "assistant", "content": ""}, **DONE},
        ],
    )
    assert all(c["id"] == "chatcmpl-x" and c["created"] == 5 for c in chunks)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [{"role": "assistant", "content": "Hel"}, {"content": "lo"}, {}, None]
    assert chunks[2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[0]["choices"][0]["finish_reason"] is None
    assert chunks[3]["choices"] == [] and chunks[3]["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert s.done


def test_chat_stream_tool_calls_and_reasoning() -> None:
    s = ChatStream("m", n=3)
    chunks = feed_all(
        s,
        index=2,
        natives=[
            {"message": {"content": "", "thinking": "let me"}, "done": False},
            {
                "message": {
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "function": {"index": 0, "name": "f", "arguments": {"x": 1}},
                        }
                    ],
                },
                "done": False,
            },
            {
                "message": {
                    "content": "",
                    "tool_calls": [{"function": {"index": 1, "name": "g", "arguments": {}}}],
                },
                "done": False,
            },
            {"message": {"content": ""}, **DONE},
        ],
    )
    assert chunks[0]["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "",
        "reasoning": "let me",
    }
    tc1 = chunks[1]["choices"][0]["delta"]["tool_calls"]
    assert tc1 == [
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "f", "arguments": json.dumps({"x": 1})},
        }
    ]
    tc2 = chunks[2]["choices"][0]["delta"]["tool_calls"][0]
    assert tc2["index"] == 1 and tc2["id"].startswith("call_")
    last = chunks[-1]["choices"][0]
    assert last == {"index": 2, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    assert len(chunks) == 4  # no usage chunk unless asked


def test_chat_stream_done_at_once_and_error() -> None:
    s = ChatStream("m", id="i", created=1)
    chunks = parse(s.feed((0, {"message": {"content": "all"}, **DONE, "done_reason": "length"})))
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": "all"},
        {},
    ]
    assert chunks[1]["choices"][0]["finish_reason"] == "length"
    err = parse(ChatStream("m").feed((0, {"error": "runner crashed"})))
    assert err == [
        {"error": {"message": "runner crashed", "type": "api_error", "param": None, "code": None}}
    ]


def test_text_completion_and_stream() -> None:
    native = {"response": "Once upon", **DONE}
    out = text_completion([native], model="m", id="cmpl-1", created=9)
    assert out["object"] == "text_completion" and out["id"] == "cmpl-1"
    assert out["choices"] == [
        {"index": 0, "text": "Once upon", "logprobs": None, "finish_reason": "stop"}
    ]
    s = CompletionStream("m", id="cmpl-2", created=9, include_usage=True)
    chunks = feed_all(s, [{"response": "Once", "done": False}, {"response": " upon", **DONE}])
    assert [c["choices"][0]["text"] if c["choices"] else None for c in chunks] == [
        "Once",
        " upon",
        "",
        None,
    ]
    assert chunks[2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[3]["usage"]["total_tokens"] == 15
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert {c["id"] for c in chunks} == {"cmpl-2"}


def test_usage_chunk_for_n_streams() -> None:
    s = ChatStream("m", id="i", created=1)
    assert s.usage_chunk(3, 4) == {
        "id": "i",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "system_fingerprint": "fp_ollama",
        "choices": [],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 4,
            "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def test_n_choices_interleaved_share_one_usage_and_fail_as_one_event() -> None:
    s = ChatStream("m", n=2, include_usage=True, id="i", created=1)
    frames = s.start()
    for index, native in [
        (1, {"message": {"content": "b"}, "done": False}),
        (0, {"message": {"content": "a"}, **DONE}),
        (1, {"message": {"content": ""}, **DONE, "eval_count": 3}),
    ]:
        assert not s.done
        frames += s.feed((index, native))
    assert s.done
    frames += s.end()
    assert frames[-1] == SSE_DONE
    chunks = parse(frames[:-1])
    assert [c["choices"][0]["index"] for c in chunks[:-1]] == [1, 0, 0, 1]
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 8,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    (error,) = parse(ChatStream("m").fail(ServerBusy("busy")))
    assert error == {"error": {"message": "busy", "type": "api_error", "param": None, "code": None}}
    (hidden,) = parse(CompletionStream("m").fail(RuntimeError("/home/me/secret")))
    assert hidden["error"]["message"] == "internal error"
