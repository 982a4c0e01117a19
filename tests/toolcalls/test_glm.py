"""GLM 4.5+ tool calls (``<tool_call>name<arg_key>..</arg_key><arg_value>..</arg_value>``)."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import GLM_46_CALL


def test_glm_46_with_newlines_and_thinking() -> None:
    check_all_splits(
        "glm_4_5",
        GLM_46_CALL,
        "",
        [("special_function", {"arg1": 1}, 0, None)],
        thinking="I'm\nthinking",
    )


def test_glm_47_compact_two_calls() -> None:
    text = (
        "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>"
        "</tool_call><tool_call>get_time<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "</tool_call>"
    )
    check_all_splits(
        "glm_4_5",
        text,
        "",
        [("special_function", {"arg1": 1}, 0, None), ("get_time", {"city": "Paris"}, 1, None)],
    )


def test_values_with_markup_inside_and_json_values() -> None:
    text = (
        "</think>\n<tool_call>f\n<arg_key>req1</arg_key>\n<arg_value>contains </think> "
        "and <tool_call> strings</arg_value>\n<arg_key>cfg</arg_key>\n"
        '<arg_value>{"a": [1, "测试"]}</arg_value>\n</tool_call>'
    )
    _, _, calls = run("glm_4_5", [text], prompt="<|assistant|><think>")
    assert calls[0].arguments == {
        "req1": "contains </think> and <tool_call> strings",
        "cfg": {"a": [1, "测试"]},
    }


def test_opened_thinking_from_the_prompt() -> None:
    content, thinking, calls = run(
        "glm_4_5", ["Reasoning.</think>Answer."], prompt="<|assistant|><think>"
    )
    assert (content, thinking, calls) == ("Answer.", "Reasoning.", [])


def test_not_a_call_is_content() -> None:
    content, _, calls = run("glm_4_5", ['<tool_call>{"name": "f"}</tool_call> then text'])
    assert calls == [] and content == '{"name": "f"} then text'
