"""LFM2 / LFM2.5: a Python list of calls, read with :mod:`ast`, never evaluated; after the
cases of llama.cpp's tests/test-chat.cpp."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import LFM2_CALLS


def wrap(calls: str) -> str:
    return f"<|tool_call_start|>[{calls}]<|tool_call_end|>"


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        (wrap("special_function(arg1=1)"), "special_function", {"arg1": 1}),
        (wrap('get_time(city="XYZCITY")'), "get_time", {"city": "XYZCITY"}),
        (wrap("get_time(city='Paris')"), "get_time", {"city": "Paris"}),
        (wrap("toggle(enabled=True)"), "toggle", {"enabled": True}),
        (wrap("set_config(config=None)"), "set_config", {"config": None}),
        (
            wrap('set_config(config={"enabled": True, "count": 3})'),
            "set_config",
            {"config": {"enabled": True, "count": 3}},
        ),
        (
            wrap('set_config(config={"enabled": true, "note": null})'),
            "set_config",
            {"config": {"enabled": True, "note": None}},
        ),
        (
            wrap('Calendar.create_event(title="demo", participants=["Alice", "Bob"])'),
            "Calendar.create_event",
            {"title": "demo", "participants": ["Alice", "Bob"]},
        ),
        (
            wrap("python(code=\"def hello():\\n    print('hey')\")"),
            "python",
            {"code": "def hello():\n    print('hey')"},
        ),
        (wrap('python(code="print(\\"hi\\") ] )")'), "python", {"code": 'print("hi") ] )'}),
        (wrap("amount(orig=-2.5)"), "amount", {"orig": -2.5}),
        (wrap("empty_args()"), "empty_args", {}),
    ],
)
def test_calls(text: str, name: str, args: dict[str, Any]) -> None:
    check_all_splits("lfm2", text, "", [(name, args, 0, None)])


def test_content_reasoning_and_two_calls() -> None:
    check_all_splits(
        "lfm2",
        "<think>plan</think>Let me check." + LFM2_CALLS,
        "Let me check.",
        [("special_function", {"arg1": 1}, 0, None), ("get_time", {"city": "Paris"}, 1, None)],
        thinking="plan",
    )


def test_markdown_links_stay_content() -> None:
    text = "Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org)."
    check_all_splits("lfm2", text, text, [])


@pytest.mark.parametrize(
    "calls",
    [
        "__import__('os').system('true')",  # not a literal: never evaluated
        "f(1)",  # positional
        "f(**{'a': 1})",
        "f(a=lambda: 1)",
        "f(a=b)",
        "1 + 1",
    ],
)
def test_anything_but_literal_keyword_calls_is_content(calls: str) -> None:
    content, _, got = run("lfm2", [wrap(calls)])
    assert got == [] and content == f"[{calls}]"


def test_surrogate_escapes_pair_up_or_become_replacement_characters() -> None:
    check_all_splits(
        "lfm2",
        wrap('get_time(city="a\\ud83d\\ude00b\\udfc2")'),
        "",
        [("get_time", {"city": "a\U0001f600b\ufffd"}, 0, None)],
    )
