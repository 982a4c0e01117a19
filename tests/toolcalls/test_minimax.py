"""MiniMax-M2 (``<minimax:tool_call>``, a tagged shape) and MiniMax-M3 (namespaced, nested
XML), after the cases of llama.cpp's tests/test-chat.cpp."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import MINIMAX_M2_CALL, MINIMAX_M3_CALL, NS


def test_m2_call_after_reasoning_the_prompt_opened() -> None:
    check_all_splits(
        "minimax_m2",
        "I'm\nthinking\n</think>\n\n" + MINIMAX_M2_CALL,
        "",
        [("special_function", {"arg1": 1}, 0, None)],
        thinking="I'm\nthinking",
        prompt="]~b]ai\n<think>\n",
    )
    check_all_splits(
        "minimax_m2", "\n</think>\n\nHello, world!", "Hello, world!", [], prompt="]~b]ai\n<think>\n"
    )


def test_m2_no_arguments_and_two_calls() -> None:
    empty = '<minimax:tool_call>\n<invoke name="empty_args">\n</invoke>\n</minimax:tool_call>'
    check_all_splits("minimax_m2", empty, "", [("empty_args", {}, 0, None)])
    two = MINIMAX_M2_CALL.replace(
        "</minimax:tool_call>",
        '<invoke name="get_time">\n'
        '<parameter name="city">Paris</parameter>\n</invoke>\n'
        "</minimax:tool_call>",
    )
    check_all_splits(
        "minimax_m2",
        "Checking." + two,
        "Checking.",
        [("special_function", {"arg1": 1}, 0, None), ("get_time", {"city": "Paris"}, 1, None)],
    )


def m3(name: str, body: str) -> str:
    return f'{NS}<tool_call>\n{NS}<invoke name="{name}">{body}{NS}</invoke>\n{NS}</tool_call>'


def el(tag: str, inner: str) -> str:
    return f"{NS}<{tag}>{inner}{NS}</{tag}>"


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        (MINIMAX_M3_CALL, "get_time", {"city": "Tokyo"}),
        (m3("special_function", el("arg1", "1")), "special_function", {"arg1": 1}),
        (m3("empty_args", ""), "empty_args", {}),
        (m3("magic_int", el("ref", "-14")), "magic_int", {"ref": -14}),
        (m3("toggle", el("enabled", "true")), "toggle", {"enabled": True}),
        (
            m3("magic_int", el("ref", "42") + el("name", "foo bar")),
            "magic_int",
            {"ref": 42, "name": "foo bar"},
        ),
        (
            m3("set_config", el("config", el("real", "1.5") + el("imaginary", "-2.5"))),
            "set_config",
            {"config": {"real": 1.5, "imaginary": -2.5}},
        ),
        (
            m3("todo_list", el("todos", el("item", "alpha") + el("item", "beta"))),
            "todo_list",
            {"todos": ["alpha", "beta"]},
        ),
        # A string parameter keeps its text as written, even when it looks structured.
        (m3("get_time", el("city", el("text", "hi"))), "get_time", {"city": el("text", "hi")}),
    ],
)
def test_m3_calls(text: str, name: str, args: dict[str, Any]) -> None:
    check_all_splits("minimax_m3", text, "", [(name, args, 0, None)])


def test_m3_reasoning_and_content() -> None:
    check_all_splits(
        "minimax_m3",
        "<mm:think>Let me check</mm:think>On it." + MINIMAX_M3_CALL,
        "On it.",
        [("get_time", {"city": "Tokyo"}, 0, None)],
        thinking="Let me check",
    )
    # A turn without reasoning opens with a bare close tag.
    check_all_splits("minimax_m3", "</mm:think>Hello, world!", "Hello, world!", [])


def test_m3_broken_is_content() -> None:
    content, _, calls = run("minimax_m3", [m3("get_time", f"{NS}<city>Tokyo")])
    assert calls == [] and "Tokyo" in content
