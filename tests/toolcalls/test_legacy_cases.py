"""The Hermes, Llama 3 and Mistral cases of the former ``template/tools.py``, at every split.

Kept case for case; a malformed call's markup is now removed from the content it
becomes (markers never reach the user), the rest of its text stays.
"""

from __future__ import annotations

from typing import Any

import pytest

from localllm.toolcalls import ToolCall
from localllm.toolcalls.base import json_end
from tests.support.toolcall_helpers import check_all_splits, format_named, run
from tests.support.toolcall_samples import (
    HERMES_CALL,
    LLAMA3_JSON,
    LLAMA3_PYTHON_TAG,
    MISTRAL_CALLS,
    MISTRAL_NEMO_CALL,
    WEATHER_ARGS,
)

W = WEATHER_ARGS
CASES: list[tuple[str, str, str, list[tuple[str, dict[str, Any], int, str | None]]]] = [
    ("hermes", HERMES_CALL, "", [("get_weather", W, 0, None)]),
    (
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {"x": [1, "</tool_call>"]}}\n'
        "</tool_call>",
        "Let me check.\n",
        [("a", {}, 0, None), ("b", {"x": [1, "</tool_call>"]}, 1, None)],
    ),
    (
        "hermes",
        "Just text with <tool and <b>tags</b>.",
        "Just text with <tool and <b>tags</b>.",
        [],
    ),
    ("hermes", "<tool_call>not json</tool_call> after", "not json after", []),
    (
        "hermes",
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
        "",
        [("f", {"a": 1}, 0, None)],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "f", "arguments": {"z": 1, "a": 2}}',
        "",
        [("f", {"z": 1, "a": 2}, 0, None)],
    ),  # stopped before the close tag
    ("hermes", '<tool_call>{"name": "f", "argu', '{"name": "f", "argu', []),
    ("llama3", LLAMA3_JSON, "", [("get_weather", W, 0, None)]),
    ("llama3", LLAMA3_PYTHON_TAG, "", [("a", {"q": "x"}, 0, None), ("b", {}, 1, None)]),
    ("llama3", '  {"name": "Bob", "age": 3}', '  {"name": "Bob", "age": 3}', []),
    ("llama3", "Hello {not a call}", "Hello {not a call}", []),
    ("llama3", '{"broken": ', '{"broken": ', []),
    ("mistral", MISTRAL_NEMO_CALL, "", [("get_weather", W, 0, "abc123XYZ")]),
    ("mistral", MISTRAL_CALLS, "Sure. ", [("get_weather", W, 0, None), ("noop", {}, 1, None)]),
    ("mistral", '[TOOL_CALLS]f[CALL_ID]id9[ARGS] {"k": "v"}', "", [("f", {"k": "v"}, 0, "id9")]),
    ("mistral", "A list [1, 2] and [TOOL_ of text", "A list [1, 2] and [TOOL_ of text", []),
    ("mistral", "[TOOL_CALLS]bad\nname", "bad\nname", []),
    ("generic", '<tool_call>{"name": "f"}</tool_call>', '<tool_call>{"name": "f"}</tool_call>', []),
]


@pytest.mark.parametrize(("fmt", "text", "content", "calls"), CASES)
def test_every_split_gives_the_same_result(
    fmt: str, text: str, content: str, calls: list[Any]
) -> None:
    check_all_splits(fmt, text, content, calls)


def test_content_is_streamed_before_calls_close() -> None:
    p = format_named("hermes").parser([{"function": {"name": "f"}}], None)
    assert p.feed("Hello wor").content == "Hello wor"
    assert p.feed("ld <tool").content == "ld "  # "<tool" is held: it may open a call
    r = p.feed('_call>{"name": "f", "arguments": {"a": 1}}')
    assert r.content == "" and r.calls == []
    r = p.feed("</tool_call>")
    assert [c.to_ollama() for c in r.calls] == [
        {"function": {"index": 0, "name": "f", "arguments": {"a": 1}}}
    ]


def test_argument_key_order_is_kept() -> None:
    _, _, calls = run(
        "hermes", ['<tool_call>{"name": "f", "arguments": {"b": 1, "a": 2, "c": 3}}</tool_call>']
    )
    assert list(calls[0].arguments) == ["b", "a", "c"]


def test_to_ollama_with_id() -> None:
    assert ToolCall("f", {}, 2, "x").to_ollama() == {
        "id": "x",
        "function": {"index": 2, "name": "f", "arguments": {}},
    }


def test_json_end() -> None:
    assert json_end('{"a": "}"} tail') == 10
    assert json_end('[{"a": [1]}, "\\"]"]x') == 19
    assert json_end('{"a": ') is None
    with pytest.raises(ValueError):
        json_end("x{}")
