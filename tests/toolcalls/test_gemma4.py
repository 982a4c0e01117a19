"""Gemma 4: ``<|tool_call>call:NAME{..}<tool_call|>`` with Gemma's own literals, after the
cases of llama.cpp's tests/test-chat.cpp."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import GEMMA4_CALL, GEMMA4_THINK

Q = '<|"|>'


def call(name: str, args: str) -> str:
    return f"<|tool_call>call:{name}{args}<tool_call|>"


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        (GEMMA4_CALL, "get_time", {"city": "Paris"}),
        (call("get_time", f"{{city:{Q}San Francisco{Q}}}"), "get_time", {"city": "San Francisco"}),
        (call("empty_args", "{}"), "empty_args", {}),
        (call("special_function", "{arg1:42}"), "special_function", {"arg1": 42}),
        (call("special_function", "{arg1:-7}"), "special_function", {"arg1": -7}),
        (call("amount", "{orig:3.14}"), "amount", {"orig": 3.14}),
        (call("amount", "{orig:1.5e10}"), "amount", {"orig": 1.5e10}),
        (call("toggle", "{enabled:true}"), "toggle", {"enabled": True}),
        (call("toggle", "{enabled:false}"), "toggle", {"enabled": False}),
        (call("set_config", "{config:null}"), "set_config", {"config": None}),
        (
            call("todo_list", f"{{todos:[{Q}buy milk{Q},{Q}walk dog{Q}]}}"),
            "todo_list",
            {"todos": ["buy milk", "walk dog"]},
        ),
        (
            call("set_config", f"{{config:{{theme:{Q}dark{Q},count:3}}}}"),
            "set_config",
            {"config": {"theme": "dark", "count": 3}},
        ),
        (call("todo_list", "{todos:[]}"), "todo_list", {"todos": []}),
        (call("set_config", "{config:{}}"), "set_config", {"config": {}}),
        # A string holds anything between its quote markers, braces and commas included.
        (call("get_time", f"{{city:{Q}a, {{b}}: c{Q}}}"), "get_time", {"city": "a, {b}: c"}),
    ],
)
def test_calls(text: str, name: str, args: dict[str, Any]) -> None:
    check_all_splits("gemma4", text, "", [(name, args, 0, None)])


def test_content_then_two_calls() -> None:
    text = (
        "Hello, world!\nWhat's up?" + GEMMA4_CALL + call("get_weather", f"{{location:{Q}Paris{Q}}}")
    )
    check_all_splits(
        "gemma4",
        text,
        "Hello, world!\nWhat's up?",
        [("get_time", {"city": "Paris"}, 0, None), ("get_weather", {"location": "Paris"}, 1, None)],
    )


def test_reasoning_channel() -> None:
    check_all_splits("gemma4", GEMMA4_THINK, "Hello, world!", [], thinking="I'm\nthinking")
    check_all_splits("gemma4", "<|channel>thought<channel|>Hello", "Hello", [])
    check_all_splits(
        "gemma4",
        "<|channel>thought\nplan<channel|>" + GEMMA4_CALL,
        "",
        [("get_time", {"city": "Paris"}, 0, None)],
        thinking="plan",
    )
    # A stray channel close after the answer is markup.
    check_all_splits(
        "gemma4", "<|channel>thought\n<channel|>Hello, world!<channel|>", "Hello, world!", []
    )


def test_broken_calls_are_content() -> None:
    assert run("gemma4", [call("get_time", "{city:}")])[2] == []
    assert run("gemma4", [call("get_time", "{city")])[2] == []
    content, _, calls = run("gemma4", ["<|tool_call>nonsense<tool_call|> after"])
    assert calls == [] and content == "nonsense after"


def test_deep_nesting_is_refused_not_a_crash() -> None:
    deep = "{a:" * 200 + "1" + "}" * 200
    content, _, calls = run("gemma4", [call("set_config", f"{{config:{deep}}}")])
    assert calls == [] and "call:set_config" in content
