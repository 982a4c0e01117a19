"""The Responses API converters (compat/responses/): requests -> native chat, chunks -> events."""

from __future__ import annotations

import base64
import json
import typing
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent

from localllm.compat.responses.request import responses_request_to_native
from localllm.compat.responses.stream import ResponsesStream, final_response
from localllm.errors import InvalidRequest, LocalLLMError

# The SDK's event classes by their ``type``: each event must validate as its own class.
EVENTS = {
    typing.get_args(c.model_fields["type"].annotation)[0]: c
    for c in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}
PNG = base64.b64encode(b"\x89PNG fake image bytes").decode()
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def native(**body: Any) -> dict[str, Any]:
    return responses_request_to_native({"model": "m", **body}).native


def refused(body: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        responses_request_to_native({"model": "m", "input": "hi", **body})
    assert words in info.value.message


def test_string_input_instructions_and_options() -> None:
    conv = responses_request_to_native(
        {
            "model": "m",
            "input": "hello",
            "instructions": "be brief",
            "max_output_tokens": 7,
            "temperature": 0.2,
            "top_p": 0.5,
            "store": True,
            "metadata": {"k": "v"},
        }
    )
    assert conv.native["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    opts = conv.native["options"]
    assert (opts["num_predict"], opts["temperature"], opts["top_p"]) == (7, 0.2, 0.5)
    assert conv.native["truncate"] is False  # OpenAI's default truncation is "disabled"
    assert conv.stream is False and "tools" not in conv.native and "format" not in conv.native
    assert conv.echo["instructions"] == "be brief" and conv.echo["max_output_tokens"] == 7
    assert native(input="x", truncation="auto")["truncate"] is True


def test_message_items_parts_roles_and_images() -> None:
    msgs = native(
        input=[
            {"role": "developer", "content": "rules"},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_text", "text": "here"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                    {"type": "input_image", "image_url": PNG, "detail": "low"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ]
    )["messages"]
    assert msgs == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "look\nhere", "images": [PNG, PNG]},
        {"role": "assistant", "content": "ok"},
    ]


def test_function_call_round_trip_items() -> None:
    msgs = native(
        input=[
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "hm"}],
            },
            {"role": "user", "content": "weather?"},
            {
                "type": "reasoning",
                "id": "rs_2",
                "summary": [{"type": "summary_text", "text": "call"}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": ""},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "noon"}],
            },
        ],
        tools=[WEATHER],
    )["messages"]
    assert msgs[0] == {"role": "user", "content": "weather?"}  # a stray reasoning item is dropped
    assert msgs[1] == {
        "role": "assistant",
        "content": "",
        "thinking": "call",
        "tool_calls": [
            {
                "id": "c1",
                "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}},
            },
            {"id": "c2", "function": {"index": 1, "name": "get_time", "arguments": {}}},
        ],
    }
    assert msgs[2:] == [
        {"role": "tool", "content": "sunny", "tool_call_id": "c1", "tool_name": "get_weather"},
        {"role": "tool", "content": "noon", "tool_call_id": "c2", "tool_name": "get_time"},
    ]


def test_tools_choice_reasoning_and_text_format() -> None:
    conv = responses_request_to_native(
        {
            "model": "m",
            "input": "x",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "reasoning": {"effort": "minimal"},
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "w",
                    "schema": {"type": "object"},
                    "strict": True,
                }
            },
        }
    )
    assert conv.native["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert (conv.tool_choice, conv.forced_tool) == ("required", "get_weather")
    assert conv.forced_tools == conv.native["tools"]
    assert conv.native["think"] == "low" and conv.native["format"] == {"type": "object"}
    assert conv.echo["tools"] == [WEATHER]
    assert native(input="x", text={"format": {"type": "json_object"}})["format"] == "json"
    assert "format" not in native(input="x", text={"format": {"type": "text"}})
    assert native(input="x", reasoning={"effort": "none"})["think"] is False
    assert native(input="x", reasoning={"effort": "high"})["think"] == "high"
    assert "tools" not in native(input="x", tools=[WEATHER], tool_choice="none")
    required = responses_request_to_native(
        {"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": "required"}
    )
    assert required.tool_choice == "required" and required.forced_tools == required.native["tools"]
    assert (
        responses_request_to_native({"model": "m", "input": "x", "tools": [WEATHER]}).forced_tools
        is None
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"previous_response_id": "resp_1", "conversation": "conv_1"}, "cannot be used"),
        ({"previous_response_id": 5}, "previous_response_id must be"),
        ({"conversation": {"name": "x"}}, "conversation must be"),
        ({"store": "yes"}, "store must be"),
        ({"prompt": {"id": "pmpt_1"}}, "no stored prompts"),
        ({"background": True}, "background"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": -5}, "max_output_tokens"),
        ({"max_output_tokens": "9"}, "max_output_tokens"),
        ({"max_output_tokens": True}, "max_output_tokens"),
        ({"input": 5}, "input must be"),
        ({"input": []}, "at least one message"),
        ({"input": [{"type": "computer_call_output"}]}, "'computer_call_output' is not supported"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
        ({"input": [{"role": "robot", "content": "x"}]}, "role"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input_file",
        ),
        ({"input": [{"role": "user", "content": [{"type": "nope"}]}]}, "'nope'"),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "https://x/y.png"}],
                    }
                ]
            },
            "remote",
        ),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": "data:image/png;base64,@@@"}
                        ],
                    }
                ]
            },
            "base64",
        ),
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{nope"}
                ]
            },
            "invalid function_call arguments",
        ),
        ({"input": [{"type": "function_call", "call_id": 3, "name": "f"}]}, "call_id"),
        ({"tools": ["get_weather"]}, "tools[] must be objects"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}, "other"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"reasoning": {"effort": "huge"}}, "reasoning.effort"),
        ({"text": {"format": {"type": "xml"}}}, "text.format"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "schema"),
        ({"temperature": "hot"}, "temperature"),
        ({"stream": "yes"}, "stream"),
        ({"model": ""}, "model"),
        ({"instructions": ["x"]}, "instructions"),
        ({"truncation": "middle"}, "truncation"),
    ],
)
def test_bad_requests_are_refused(body: dict[str, Any], words: str) -> None:
    refused(body, words)


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        ({"k": {"deep": [[[["x"]]]]}}, "metadata.k must be a string"),
        ({"k": 7}, "metadata.k must be a string"),
        ({f"k{i}": "v" for i in range(17)}, "metadata has 17 pairs; at most 16"),
        ({"k" * 65: "v"}, "metadata keys are at most 64 characters, got 65"),
        ({"k": "v" * 513}, "metadata.k is at most 512 characters, got 513"),
        (["k", "v"], "metadata must be an object"),
        ("k=v", "metadata must be an object"),
    ],
)
def test_metadata_is_held_to_openais_limits(metadata: Any, words: str) -> None:
    # It is echoed in the response and in every stream event: any depth, any size was.
    refused({"metadata": metadata}, words)


def test_metadata_at_the_limits_is_echoed() -> None:
    most = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    for metadata, echoed in ((most, most), (None, {}), ({}, {})):
        conv = responses_request_to_native({"model": "m", "input": "hi", "metadata": metadata})
        assert conv.echo["metadata"] == echoed


def chunk(done: bool = False, **message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": "m",
        "message": {"role": "assistant", "content": "", **message},
        "done": done,
    }
    if done:
        out.update(done_reason=message.pop("reason", "stop"), prompt_eval_count=5, eval_count=9)
        out["message"].pop("reason", None)
    return out


def parse(frames: list[str]) -> list[dict[str, Any]]:
    """The events of SSE frames, each with an ``event:`` line naming its type."""
    events = []
    for frame in frames:
        head, data, rest = frame.split("\n", 2)
        assert data.startswith("data: ") and rest == "\n"
        event = json.loads(data[len("data: ") :])
        assert head == f"event: {event['type']}"
        events.append(event)
    return events


def run(
    chunks: list[dict[str, Any]], echo: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    stream = ResponsesStream("m", echo or {})
    frames = stream.start()
    for c in chunks:
        frames += stream.feed(c)
    frames += stream.end()
    events = parse(frames)
    for event in events:  # every event is one the official SDK parses
        EVENTS[event["type"]].model_validate(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events, stream.response


def test_stream_reasoning_then_text_events() -> None:
    events, final = run(
        [
            chunk(thinking="pl"),
            chunk(thinking="an"),
            chunk(content="Hel"),
            chunk(content="lo"),
            chunk(True),
        ]
    )
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress" and not events[0]["response"]["output"]
    parsed = Response.model_validate(final)
    assert parsed.output_text == "Hello" and parsed.status == "completed"
    assert parsed.output[0].type == "reasoning" and parsed.output[0].summary[0].text == "plan"
    assert parsed.usage is not None and (
        parsed.usage.input_tokens,
        parsed.usage.output_tokens,
        parsed.usage.total_tokens,
    ) == (5, 9, 14)
    assert events[-1]["response"] == final
    assert [e["output_index"] for e in events if "output_index" in e] == [0] * 7 + [1] * 7
    assert (
        final_response(chunk(True, thinking="plan", content="Hello"), "m", {})["output"][1][
            "content"
        ]
        == final["output"][1]["content"]
    )


def test_stream_tool_call_and_length_and_empty() -> None:
    call = {
        "id": "call_9",
        "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}},
    }
    events, final = run([chunk(content="Let me see."), chunk(tool_calls=[call]), chunk(True)])
    kinds = [e["type"] for e in events]
    assert kinds[-5:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    fc = final["output"][1]
    assert (fc["type"], fc["call_id"], fc["name"], fc["arguments"]) == (
        "function_call",
        "call_9",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert events[-5]["item"]["arguments"] == ""  # the added item has no arguments yet

    events, final = run(
        [chunk(content="abc"), chunk(True, reason="length")], {"max_output_tokens": 3}
    )
    assert events[-1]["type"] == "response.incomplete"
    assert final["status"] == "incomplete" and final["max_output_tokens"] == 3
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"

    events, final = run([chunk(True)])
    assert Response.model_validate(final).output_text == ""
    assert [o["type"] for o in final["output"]] == ["message"]


def test_failure_and_sse_frame() -> None:
    stream = ResponsesStream("m", {})
    stream.start()
    frames = stream.fail(LocalLLMError("runner died"))
    assert frames[0].startswith("event: error\ndata: {") and frames[0].endswith("}\n\n")
    events = parse(frames)
    assert [e["type"] for e in events] == ["error", "response.failed"]
    for event in events:
        EVENTS[event["type"]].model_validate(event)
    assert events[1]["response"]["error"]["message"] == "runner died"
    hidden = parse(ResponsesStream("m", {}).fail(RuntimeError("/home/me/secret")))
    assert hidden[0]["message"] == "internal error"


def test_usage_counts_the_prompt_tokens_the_cache_held() -> None:
    final = final_response({**chunk(True, content="Hi"), "prompt_cached_count": 4}, "m", {})
    usage = Response.model_validate(final).usage
    assert usage is not None and usage.input_tokens == 5
    assert usage.input_tokens_details.cached_tokens == 4  # a part of input_tokens
