"""Command-R7B / Cohere2 MoE: <|START_THINKING|>, <|START_ACTION|> lists, response wrappers."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits
from tests.support.toolcall_samples import COHERE2_TEXT, COMMAND_R_ACTION


def test_thinking_then_action() -> None:
    check_all_splits(
        "command_r7b",
        "<|START_THINKING|>I'm\nthinking<|END_THINKING|>" + COMMAND_R_ACTION,
        "",
        [("special_function", {"arg1": 1}, 0, "0")],
        thinking="I'm\nthinking",
    )


def test_response_markers_are_not_content() -> None:
    text = "<|START_THINKING|><|END_THINKING|><|START_RESPONSE|>Hello, world!<|END_RESPONSE|>"
    check_all_splits("command_r7b", text, "Hello, world!", [])


def test_cohere2_moe_opened_thinking() -> None:
    check_all_splits(
        "command_r7b",
        COHERE2_TEXT,
        "Hello, world!",
        [],
        thinking="I'm\nthinking",
        prompt="<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>",
    )


def test_partial_action_at_the_end_is_content() -> None:
    text = '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_function", '
    check_all_splits("command_r7b", text, text.removeprefix("<|START_ACTION|>"), [])
