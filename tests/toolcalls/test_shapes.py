"""The dedicated tagged and JSON formats (``shapes.py``): DeepSeek V3.2/V4 DSML, Kimi K3,
MiniCPM5, Functionary v3.1, Nemotron Nano v2, Apriel; after the cases of llama.cpp's
tests/test-chat.cpp."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.toolcall_helpers import check_all_splits, run
from tests.support.toolcall_samples import (
    APRIEL_CALL,
    DSML_CALL,
    DSML_V4_CALL,
    FUNCTIONARY_V31_CALL,
    KIMI_K3_ANSWER,
    KIMI_K3_CALL,
    MINICPM5_CALL,
    NEMOTRON_V2_CALL,
)

D = "｜DSML｜"
SF = [("special_function", {"arg1": 1}, 0, None)]


def dsml(*invokes: str, block: str = "function_calls") -> str:
    return f"<{D}{block}>\n" + "".join(invokes) + f"</{D}{block}>"


def invoke(name: str, /, **params: tuple[str, str]) -> str:
    body = "".join(
        f'<{D}parameter name="{k}" string="{s}">{v}</{D}parameter>\n'
        for k, (v, s) in params.items()
    )
    return f'<{D}invoke name="{name}">\n{body}</{D}invoke>\n'


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (DSML_CALL, [("get_time", {"city": "Tokyo"}, 0, None)]),
        (dsml(invoke("special_function", arg1=("1", "false"))), SF),
        (dsml(invoke("magic_int", ref=("-14", "false"))), [("magic_int", {"ref": -14}, 0, None)]),
        (
            dsml(invoke("todo_list", todos=('["buy milk","walk dog"]', "false"))),
            [("todo_list", {"todos": ["buy milk", "walk dog"]}, 0, None)],
        ),
        (
            dsml(invoke("set_config", config=('{"theme":"dark","level":2}', "false"))),
            [("set_config", {"config": {"theme": "dark", "level": 2}}, 0, None)],
        ),
        (
            dsml(invoke("magic_int", ref=("42", "false"), name=("foo bar", "true"))),
            [("magic_int", {"ref": 42, "name": "foo bar"}, 0, None)],
        ),
        (
            dsml(
                invoke("get_time", city=("Paris", "true")),
                invoke("get_weather", location=("Paris", "true")),
            ),
            [
                ("get_time", {"city": "Paris"}, 0, None),
                ("get_weather", {"location": "Paris"}, 1, None),
            ],
        ),
    ],
)
def test_deepseek_v3_2(text: str, calls: list[Any]) -> None:
    check_all_splits("deepseek_v3_2", text, "", calls)


def test_deepseek_v3_2_reasoning_then_content_then_call() -> None:
    check_all_splits(
        "deepseek_v3_2",
        "Thinking about it</think>Let me call.\n\n" + DSML_CALL,
        "Let me call.\n\n",
        [("get_time", {"city": "Tokyo"}, 0, None)],
        thinking="Thinking about it",
        prompt="<｜Assistant｜><think>",
    )


def test_deepseek_v4_block() -> None:
    check_all_splits(
        "deepseek_v4", "</think>\n\n" + DSML_V4_CALL, "", [("get_time", {"city": "Tokyo"}, 0, None)]
    )


def test_kimi_k3() -> None:
    check_all_splits("kimi_k3", KIMI_K3_CALL, "", SF)
    check_all_splits(
        "kimi_k3",
        KIMI_K3_ANSWER,
        "Hello, world!",
        [],
        thinking="I'm thinking",
        prompt='<|open|>message role="assistant"<|sep|><|open|>think<|sep|>',
    )
    two = KIMI_K3_CALL.replace(
        "<|close|>tools",
        '<|open|>call tool="get_time" index="2"<|sep|><|open|>argument '
        'key="city" type="string"<|sep|>print(\'hey\')<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools",
    )
    check_all_splits("kimi_k3", two, "", [*SF, ("get_time", {"city": "print('hey')"}, 1, None)])


def test_minicpm5() -> None:
    check_all_splits("minicpm5", MINICPM5_CALL, "", [("python", {"code": "print('hey')"}, 0, None)])
    check_all_splits(
        "minicpm5", '<function name="empty_args"></function>', "", [("empty_args", {}, 0, None)]
    )
    cdata = (
        '<function name="python"><param name="code"><![CDATA[<a href="/x">hi</a> </param>]]>'
        "</param></function>"
    )
    check_all_splits(
        "minicpm5", cdata, "", [("python", {"code": '<a href="/x">hi</a> </param>'}, 0, None)]
    )
    check_all_splits(
        "minicpm5",
        "I'm thinking</think>" + MINICPM5_CALL,
        "",
        [("python", {"code": "print('hey')"}, 0, None)],
        thinking="I'm thinking",
        prompt="<|im_start|>assistant\n<think>\n",
    )


def test_functionary_v3_1() -> None:
    check_all_splits("functionary_v3_1", FUNCTIONARY_V31_CALL, "", SF)
    check_all_splits(
        "functionary_v3_1",
        "Sure." + FUNCTIONARY_V31_CALL + '<function=get_time>{"city": "Paris"}</function>',
        "Sure.",
        [*SF, ("get_time", {"city": "Paris"}, 1, None)],
    )
    check_all_splits(
        "functionary_v3_1",
        "<|python_tag|>print(1)",
        "",
        [("python", {"code": "print(1)"}, 0, None)],
    )


@pytest.mark.parametrize(
    ("fmt", "text"), [("nemotron_v2", NEMOTRON_V2_CALL), ("apriel", APRIEL_CALL)]
)
def test_json_lists(fmt: str, text: str) -> None:
    check_all_splits(fmt, text, "", SF)
    check_all_splits(fmt, "Sure. " + text + "\n", "Sure. ", SF)


def test_nemotron_reasoning_the_prompt_opened() -> None:
    check_all_splits(
        "nemotron_v2",
        "I'm\nthinking\n</think>\n" + NEMOTRON_V2_CALL,
        "",
        SF,
        thinking="I'm\nthinking",
        prompt="<SPECIAL_11>Assistant\n<think>\n",
    )


def test_apriel_reasoning_until_the_final_response_marker() -> None:
    template = "[BEGIN FINAL RESPONSE]"
    prompt = "<|begin_assistant|>\nHere are my reasoning steps:\n"
    check_all_splits(
        "apriel",
        "I'm\nthinking\n[BEGIN FINAL RESPONSE]\n" + APRIEL_CALL,
        "",
        SF,
        thinking="I'm\nthinking",
        prompt=prompt,
        template=template,
    )
    content, thinking, _ = run(
        "apriel",
        ["plan\n[BEGIN FINAL RESPONSE]\nHi[END FINAL RESPONSE]"],
        prompt=prompt,
        template=template,
    )
    assert (content, thinking) == ("Hi", "plan")
