"""DeepSeek R1 (fenced JSON) and V3.1 (bare JSON) tool calls, with <think> reasoning."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits
from tests.support.toolcall_samples import DEEPSEEK_R1_CALL, DEEPSEEK_V31_CALLS


def test_r1_after_thinking_opened_by_the_prompt() -> None:
    check_all_splits(
        "deepseek_r1",
        "REASONING</think>" + DEEPSEEK_R1_CALL,
        "",
        [("get_time", {"city": "Tokyo"}, 0, None)],
        thinking="REASONING",
        prompt="<｜Assistant｜><think>\n",
    )


def test_v31_content_and_two_calls() -> None:
    check_all_splits(
        "deepseek_v3_1",
        DEEPSEEK_V31_CALLS,
        "CONTENT",
        [("get_time", {"city": "Paris"}, 0, None), ("get_weather", {"location": "Paris"}, 1, None)],
        thinking="REASONING",
        prompt="<｜Assistant｜><think>",
    )


def test_plain_reply_and_broken_call() -> None:
    check_all_splits("deepseek_v3_1", "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", [])
    broken = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{oops}"
    check_all_splits("deepseek_v3_1", broken, "get_time{oops}", [])
