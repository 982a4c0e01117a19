"""gpt-oss harmony replies (raw outputs as in llama.cpp's tests): channels and calls."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import HARMONY_CALL, HARMONY_FINAL, HARMONY_THOUGHT

THOUGHT = HARMONY_THOUGHT
CALL = [("special_function", {"arg1": 1}, 0, None)]


def test_final_and_commentary_are_content() -> None:
    check_all_splits(
        "gpt_oss",
        "<|channel|>final<|message|>Hello, world!\nWhat's up?",
        "Hello, world!\nWhat's up?",
        [],
    )
    check_all_splits("gpt_oss", "<|channel|>commentary<|message|>Hello", "Hello", [])


def test_analysis_is_thinking() -> None:
    check_all_splits(
        "gpt_oss", HARMONY_FINAL + "<|return|>", "Hello, world!", [], thinking="I'm\nthinking"
    )
    check_all_splits(
        "gpt_oss", "<|channel|>analysis<|message|>I'm\nthinking", "", [], thinking="I'm\nthinking"
    )


def test_think_false_drops_the_analysis() -> None:
    text = THOUGHT + "<|start|>assistant<|channel|>final<|message|>Hi"
    assert run("gpt_oss", [text], think=False)[:2] == ("Hi", "")


def test_recipient_in_the_header_or_the_channel() -> None:
    for text in [
        ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
        '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
        ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
        '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}<|call|>',
    ]:
        check_all_splits("gpt_oss", text, "", CALL)


def test_reasoning_then_call() -> None:
    check_all_splits("gpt_oss", HARMONY_CALL, "", CALL, thinking="I'm\nthinking")


def test_builtin_tools_and_edge_headers() -> None:
    text = (
        THOUGHT + "<|start|>assistant to=container.exec<|channel|>commentary<|message|>"
        "python3 -c 'print(1)'"
    )
    check_all_splits("gpt_oss", text, "", [], thinking="I'm\nthinking")
    text = (
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello"
    )
    check_all_splits("gpt_oss", text, "Hello", [], thinking="I'm\nthinking")


def test_plain_text_and_bad_calls_are_content() -> None:
    check_all_splits("gpt_oss", "Just text.", "Just text.", [])
    bad = '<|channel|>commentary to=functions.nope<|message|>{"a": 1}<|call|>'
    check_all_splits("gpt_oss", bad, '{"a": 1}', [])
    check_all_splits("gpt_oss", bad.replace("nope", "special_function"), '{"a": 1}', [], tools=None)
