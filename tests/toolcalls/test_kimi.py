"""Kimi K2 tool calls: ids ``functions.<name>:<n>`` kept as the call ids."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits
from tests.support.toolcall_samples import KIMI_CALLS

CALLS = KIMI_CALLS


def test_two_calls_with_ids() -> None:
    check_all_splits(
        "kimi_k2",
        "Checking." + CALLS,
        "Checking.",
        [
            ("get_weather", {"location": "Paris"}, 0, "functions.get_weather:0"),
            ("special_function", {"arg1": 1}, 1, "functions.special_function:1"),
        ],
    )


def test_thinking_model() -> None:
    check_all_splits(
        "kimi_k2",
        "<think>plan</think>" + CALLS[: -len("<|tool_calls_section_end|>")],
        "",
        [
            ("get_weather", {"location": "Paris"}, 0, "functions.get_weather:0"),
            ("special_function", {"arg1": 1}, 1, "functions.special_function:1"),
        ],
        thinking="plan",
    )
