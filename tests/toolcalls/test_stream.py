"""Behaviour shared by every marker-based format: reasoning, held markers, fallbacks."""

from __future__ import annotations

import logging

import pytest

from tests.support.toolcall_helpers import TOOLS, check_all_splits, format_named, run
from tests.support.toolcall_samples import THINK_ANSWER


def test_reasoning_is_split_without_asking_and_dropped_when_off() -> None:
    text = THINK_ANSWER
    assert run("hermes", [text], think=None)[:2] == ("Answer.", "plan")
    assert run("hermes", [text], think=True)[:2] == ("Answer.", "plan")
    assert run("hermes", [text], think=False)[:2] == ("Answer.", "")


def test_a_call_never_streams_as_content() -> None:
    parser = format_named("mistral").parser(TOOLS, None)
    text = '[TOOL_CALLS]get_time[ARGS]{"city": "Paris"}'
    results = [parser.feed(ch) for ch in text] + [parser.finish()]
    assert "".join(r.content for r in results) == ""
    assert [c.name for r in results for c in r.calls] == ["get_time"]


def test_without_tools_markup_is_text_without_markers() -> None:
    check_all_splits(
        "mistral",
        '[TOOL_CALLS]get_time[ARGS]{"city": "Paris"}',
        'get_time{"city": "Paris"}',
        [],
        tools=None,
    )
    check_all_splits(
        "hermes",
        'x <tool_call>{"name": "f", "arguments": {}}</tool_call>',
        'x {"name": "f", "arguments": {}}',
        [],
        tools=None,
    )


def test_unknown_function_is_content_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        content, _, calls = run(
            "hermes", ['<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>']
        )
    assert calls == [] and content == '{"name": "rm_rf", "arguments": {}}'
    assert "unknown function 'rm_rf'" in caplog.text


def test_stray_markers_never_reach_content() -> None:
    check_all_splits("kimi_k2", "a<|tool_call_end|>b<|tool_calls_section_end|>c", "abc", [])
    check_all_splits("command_r7b", "<|START_RESPONSE|>hi<|END_RESPONSE|>", "hi", [])


def test_generic_splits_think_and_passes_text() -> None:
    check_all_splits(
        "generic",
        "<think>a</think>b [TOOL_CALLS] <tool_call>",
        "b [TOOL_CALLS] <tool_call>",
        [],
        thinking="a",
    )


def test_a_lone_surrogate_escape_becomes_a_replacement_character() -> None:
    # json.loads gives a str no UTF-8 encoder takes: the response would fail with a 500.
    text = '<tool_call>{"name": "get_time", "arguments": {"city": "P\\udf88s \\ud83d\\ude00"}}'
    check_all_splits(
        "hermes",
        text + "</tool_call>",
        "",
        [("get_time", {"city": "P\ufffds \U0001f600"}, 0, None)],
    )
    text = '<|tool_call>call:get_time{city:<|"|>x<|"|>}<tool_call|>'
    check_all_splits("gemma4", text, "", [("get_time", {"city": "x"}, 0, None)])
    check_all_splits(
        "qwen3_coder",
        "<tool_call>\n<function=special_function>\n"
        '<parameter=arg1>\n"\\udf88"\n</parameter>\n</function>\n</tool_call>',
        "",
        [("special_function", {"arg1": "\ufffd"}, 0, None)],
    )
