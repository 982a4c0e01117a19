"""Qwen3-Coder / Qwen3.5 / Nemotron / Seed-OSS XML tool calls, as llama.cpp's tests write them."""

from __future__ import annotations

import logging

import pytest

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import SEED_OSS_CALL, XML_CALL

ONE = XML_CALL


def test_one_call_typed_by_schema() -> None:
    check_all_splits("qwen3_coder", ONE, "", [("special_function", {"arg1": 1}, 0, None)])


def test_content_then_two_calls() -> None:
    text = (
        "Let me see.\n" + ONE + "\n<tool_call>\n<function=special_function_with_opt>\n"
        "<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    check_all_splits(
        "qwen3_coder",
        text,
        "Let me see.\n",
        [
            ("special_function", {"arg1": 1}, 0, None),
            ("special_function_with_opt", {"arg1": 1, "arg2": 2}, 1, None),
        ],
    )


def test_string_parameters_keep_their_text() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=location>\n42\n</parameter>\n"
        "<parameter=unit>\na < b\nand </parameter in text\n</parameter>\n</function>\n"
        "</tool_call>"
    )
    check_all_splits(
        "qwen3_coder",
        text,
        "",
        [("get_weather", {"location": "42", "unit": "a < b\nand </parameter in text"}, 0, None)],
    )


def test_without_the_opening_tag() -> None:
    text = (
        "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>"
    )
    check_all_splits("qwen3_coder", text, "", [("special_function", {"arg1": 1}, 0, None)])


def test_unknown_parameter_types_read_as_json() -> None:
    text = (
        "<tool_call><function=f><parameter=n>[1, 2]</parameter><parameter=s>hi there"
        "</parameter></function></tool_call>"
    )
    _, _, calls = run("qwen3_coder", [text])
    assert calls[0].arguments == {"n": [1, 2], "s": "hi there"}


def test_seed_oss() -> None:
    check_all_splits(
        "seed_oss",
        SEED_OSS_CALL,
        "",
        [("special_function", {"arg1": 1}, 0, None)],
        thinking="I'm thinking",
        template="<seed:think></seed:think>",
    )


def test_unknown_function_is_content(caplog: pytest.LogCaptureFixture) -> None:
    text = "<tool_call>\n<function=nope>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>"
    with caplog.at_level(logging.WARNING):
        content, _, calls = run("qwen3_coder", [text])
    assert calls == [] and "unknown function 'nope'" in caplog.text
    assert "<tool_call>" not in content and "<function=nope>" in content


def test_unterminated_call_is_content() -> None:
    content, _, calls = run(
        "qwen3_coder", ["<tool_call>\n<function=special_function>\n<parameter=arg1>\n1"]
    )
    assert calls == [] and content == "\n<function=special_function>\n<parameter=arg1>\n1"
