"""Muse Glimmer: ``to=`` messages, calls in ``<atem:..>`` markup; after the cases of
llama.cpp's tests/test-chat.cpp."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits
from tests.support.toolcall_samples import MUSE_ANSWER, MUSE_CALL

SF = [("special_function", {"arg1": 1}, 0, None)]
MARKUP = MUSE_CALL.split("<|message|>", 1)[1]


def test_answer_and_thinking() -> None:
    check_all_splits("muse_glimmer", " to=user<|message|>Hello, world!<|eot|>", "Hello, world!", [])
    check_all_splits("muse_glimmer", MUSE_ANSWER, "Hello, world!", [], thinking="I'm\nthinking")


def test_call_first_and_after_an_answer() -> None:
    check_all_splits("muse_glimmer", MUSE_CALL, "", SF)
    check_all_splits(
        "muse_glimmer",
        " to=user<|message|>Hello!<|eom|><|start|>assistant" + MUSE_CALL,
        "Hello!",
        SF,
    )


def test_markup_quoted_in_an_answer_stays_content() -> None:
    text = " to=user<|message|>You invoke it like this:\n" + MARKUP + "<|eot|>"
    check_all_splits("muse_glimmer", text, "You invoke it like this:\n" + MARKUP, [])
    thought = " to=self<|message|>I could use " + MARKUP + " here<|eom|>"
    check_all_splits(
        "muse_glimmer",
        thought + "<|start|>assistant to=user<|message|>Hi<|eot|>",
        "Hi",
        [],
        thinking="I could use " + MARKUP + " here",
    )
