"""Cases of llama.cpp's tests/test-chat.cpp that our parsers first got wrong, now kept.

Every simple case of that file (about 300: a raw reply, the tools, what it parses to)
was run through our parsers; these are the behaviours it taught, written here for our
own tools and samples.  Where we differ on purpose it is said below.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.template_corpus import corpus
from tests.support.toolcall_helpers import check_all_splits, run, tool

XML = (
    "<tool_call>\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)
PARIS = [("get_time", {"city": "Paris"}, 0, None)]


def test_a_call_from_reasoning_never_closed_is_a_call() -> None:
    # Qwen3.5: the prompt opens <think>; the model starts its call without closing it.
    check_all_splits(
        "qwen3_coder",
        "Need to look.\n" + XML,
        "",
        PARIS,
        thinking="Need to look.",
        prompt="<|im_start|>assistant\n<think>\n",
    )
    # Kimi K2 Thinking opens the block itself and calls from inside it.
    kimi = (
        "<think>I need to call<|tool_calls_section_begin|><|tool_call_begin|>"
        'functions.get_time:0<|tool_call_argument_begin|>{"city": "Paris"}'
        "<|tool_call_end|><|tool_calls_section_end|>"
    )
    check_all_splits(
        "kimi_k2",
        kimi,
        "",
        [("get_time", {"city": "Paris"}, 0, "functions.get_time:0")],
        thinking="I need to call",
    )


def test_a_call_written_inside_reasoning_that_closes_is_reasoning() -> None:
    text = (
        '<think>Let me think about <|tool_call_start|>[get_time(city="Rome")]'
        '<|tool_call_end|> hmm</think><|tool_call_start|>[get_time(city="Paris")]'
        "<|tool_call_end|>"
    )
    check_all_splits(
        "lfm2",
        text,
        "",
        PARIS,
        thinking=(
            'Let me think about <|tool_call_start|>[get_time(city="Rome")]<|tool_call_end|> hmm'
        ),
    )


def test_a_reply_that_skips_the_reasoning_the_prompt_opened() -> None:
    # Kimi K3's prompt opens <|open|>think<|sep|>; the model answers straight away.
    prompt = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
    check_all_splits(
        "kimi_k3",
        "<|open|>response<|sep|>Hello<|close|>response<|sep|><|close|>message<|sep|>",
        "Hello",
        [],
        prompt=prompt,
    )
    check_all_splits("qwen3_coder", XML, "", PARIS, prompt="assistant\n<think>\n")
    # MiniMax-M3's prompt opens <mm:think>, and the model writes it once more.
    check_all_splits(
        "minimax_m3",
        "<mm:think>plan</mm:think>Hi",
        "Hi",
        [],
        thinking="plan",
        prompt="]~b]ai\n<mm:think>",
    )


UNION = [
    tool(
        "set_union",
        value={"type": ["string", "object"]},
        amount={"type": ["string", "integer"]},
        price={"type": ["string", "number"]},
    )
]


@pytest.mark.parametrize(
    ("value", "amount", "want"),
    [
        ('{"a": 1}', "2 dollars", {"value": {"a": 1}, "amount": "2 dollars"}),
        ("{not valid json", "42", {"value": "{not valid json", "amount": 42}),
        ("[1]", "4.5", {"value": "[1]", "amount": "4.5"}),  # an array is neither
    ],
)
def test_a_parameter_that_may_be_a_string_or_else(
    value: str, amount: str, want: dict[str, Any]
) -> None:
    text = (
        "<tool_call>\n<function=set_union>\n<parameter=value>\n"
        + value
        + "\n</parameter>\n<parameter=amount>\n"
        + amount
        + "\n</parameter>\n</function>\n"
        "</tool_call>"
    )
    check_all_splits("qwen3_coder", text, "", [("set_union", want, 0, None)], tools=UNION)
    glm = (
        "<tool_call>set_union\n<arg_key>value</arg_key>\n<arg_value>"
        + value
        + "</arg_value>\n<arg_key>price</arg_key>\n<arg_value>7</arg_value>\n</tool_call>"
    )
    check_all_splits(
        "glm_4_5",
        glm,
        "",
        [("set_union", {"value": want["value"], "price": 7}, 0, None)],
        tools=UNION,
    )


def test_seed_oss_values_keep_their_newlines() -> None:
    # Seed-OSS writes no newline around a value, so one there is the value's own.
    text = (
        "<seed:tool_call>\n<function=get_weather>\n<parameter=location>a\nb\n</parameter>\n"
        "</function>\n</seed:tool_call>"
    )
    check_all_splits("seed_oss", text, "", [("get_weather", {"location": "a\nb\n"}, 0, None)])


@pytest.mark.parametrize(
    "text",
    [
        "<|channel>thought\n<channel|>Hello<|channel>thought\n<channel|>",
        "<|channel>thought\n<channel|>Hello<|channel>thought\n<channel|><channel|>",
    ],
)
def test_gemma4_stray_channels_are_markup(text: str) -> None:
    assert run("gemma4", [text])[:2] == ("Hello\n", "")


def test_ling_3_turn_end_is_markup() -> None:
    assert run("glm_4_5", ["Here is the answer.<|role_end|>"])[0] == "Here is the answer."


def test_derived_formats_remove_the_answer_wrappers_of_their_template() -> None:
    source = corpus()["CohereForAI-c4ai-command-r-plus-tool_use.jinja"]
    assert (
        run("derived", ["<|CHATBOT_TOKEN|>Hello<|END_OF_TURN_TOKEN|>"], template=source)[0]
        == "Hello"
    )


def test_apriel_reasoning_leaves_out_the_prompts_own_preamble() -> None:
    # On purpose unlike llama.cpp, whose reasoning starts "Here are my reasoning steps:"
    # (the generation prompt's words, not the model's).
    prompt = "<|begin_assistant|>\nHere are my reasoning steps:\n"
    got = run(
        "apriel",
        ["I'm\nthinking\n[BEGIN FINAL RESPONSE]\nHi"],
        prompt=prompt,
        template="[BEGIN FINAL RESPONSE]",
    )
    assert got[:2] == ("Hi", "I'm\nthinking")


def test_reasoning_cut_off_after_a_mere_marker_stays_reasoning() -> None:
    # The reply ends inside the block (a token budget) after mentioning a marker: no call
    # to read there, so it is all reasoning, as it would have been without the marker.
    check_all_splits(
        "hermes",
        "<think>maybe <tool_call> is the way",
        "",
        [],
        thinking="maybe <tool_call> is the way",
    )
