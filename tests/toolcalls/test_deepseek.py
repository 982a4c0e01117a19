"""DeepSeek R1 (fenced JSON) and V3.1 (bare JSON) tool calls, with <think> reasoning."""

from __future__ import annotations

from tests.toolcalls.helpers import check_all_splits

R1 = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
      '{"city": "Tokyo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')


def test_r1_after_thinking_opened_by_the_prompt() -> None:
    check_all_splits("deepseek_r1", "REASONING</think>" + R1, "",
                     [("get_time", {"city": "Tokyo"}, 0, None)], thinking="REASONING",
                     prompt="<｜Assistant｜><think>\n")


def test_v31_content_and_two_calls() -> None:
    text = ("REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time"
            '<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather'
            '<｜tool▁sep｜>{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
    check_all_splits("deepseek_v3_1", text, "CONTENT",
                     [("get_time", {"city": "Paris"}, 0, None),
                      ("get_weather", {"location": "Paris"}, 1, None)],
                     thinking="REASONING", prompt="<｜Assistant｜><think>")


def test_plain_reply_and_broken_call() -> None:
    check_all_splits("deepseek_v3_1", "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?",
                     [])
    broken = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{oops}"
    check_all_splits("deepseek_v3_1", broken, "get_time{oops}", [])
