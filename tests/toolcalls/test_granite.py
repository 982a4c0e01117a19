"""IBM Granite 3.x: ``<|tool_call|>[..]``, ``<think>`` reasoning, ``<response>`` wrappers."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits
from tests.support.toolcall_samples import GRANITE_CALLS, GRANITE_RESPONSE


def test_call_list() -> None:
    check_all_splits(
        "granite",
        GRANITE_CALLS,
        "",
        [("special_function", {"arg1": 1}, 0, None), ("get_time", {"city": "Paris"}, 1, None)],
    )


def test_thinking_and_response() -> None:
    check_all_splits(
        "granite", GRANITE_RESPONSE, "Hello, world!\nWhat's up?", [], thinking="I'm\nthinking"
    )


def test_markers_without_tools_are_dropped() -> None:
    text = '<|tool_call|>[{"name": "f", "arguments": {}}]'
    check_all_splits("granite", text, '[{"name": "f", "arguments": {}}]', [], tools=None)
