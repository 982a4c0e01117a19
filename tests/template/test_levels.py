"""Think levels reach each family's own template variables (real templates from the corpus)."""

from __future__ import annotations

import pytest

from localllm.errors import InvalidRequest
from localllm.template.chat import render_chat
from localllm.template.levels import parse_think, think_variables
from localllm.template.select import render_prompt
from tests.support.template_corpus import corpus

HI = [{"role": "user", "content": "hi"}]


def tail(name: str, think: bool | str | None) -> str:
    return render_chat(corpus()[name], HI, think=think)[-200:]


@pytest.mark.parametrize(
    ("think", "effort"),
    [
        (None, "medium"),
        (True, "medium"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
        ("max", "high"),
        (False, "low"),
    ],
)
def test_gpt_oss_reads_reasoning_effort(think: bool | str | None, effort: str) -> None:
    assert f"Reasoning: {effort}\n" in render_chat(
        corpus()["openai-gpt-oss-120b.jinja"], HI, think=think
    )


def test_qwen3_reads_enable_thinking() -> None:
    assert tail("Qwen-Qwen3-0.6B.jinja", False).endswith("<think>\n\n</think>\n\n")
    for think in (None, True, "high"):
        assert tail("Qwen-Qwen3-0.6B.jinja", think).endswith("assistant\n")


def test_deepseek_v31_reads_thinking() -> None:
    assert tail("deepseek-ai-DeepSeek-V3.1.jinja", True).endswith("<｜Assistant｜><think>")
    assert tail("deepseek-ai-DeepSeek-V3.1.jinja", False).endswith("<think></think>")


def test_granite_reads_thinking() -> None:
    granite = corpus()["ibm-granite-granite-3.3-2B-Instruct.jinja"]
    assert "<think></think>" in render_chat(granite, HI, think="high")
    assert "<think></think>" not in render_chat(granite, HI, think=False)


def test_other_families_words() -> None:
    assert "reasoning_effort:no_think" in tail("tencent-Hy3.jinja", False)
    assert "reasoning_effort:high" in tail("tencent-Hy3.jinja", True)
    assert tail("MiniMax-M3.jinja", False).endswith("</mm:think>")
    assert "thinking budget is 0" in tail("ByteDance-Seed-OSS.jinja", False)
    assert tail("Cohere2MoE.jinja", False).endswith("<|START_THINKING|><|END_THINKING|>")
    assert tail("Kimi-K3.jinja", False).endswith("<|open|>response<|sep|>")


def test_only_variables_the_template_reads_are_set() -> None:
    assert think_variables("{{ messages }}", "high") == {}
    assert think_variables("{{ enable_thinking }}", "high") == {"enable_thinking": True}
    assert think_variables("{{ enable_thinking }}", None) == {}


def test_go_templates_get_think_and_level() -> None:
    go = "{{ if .IsThinkSet }}{{ .Think }}/{{ .ThinkLevel }}{{ end }}{{ range .Messages }}{{ end }}"
    assert render_prompt(go, None, HI, think="high") == "true/high"
    assert render_prompt(go, None, HI, think=False) == "false/"
    assert render_prompt(go, None, HI) == ""


def test_parse_think() -> None:
    assert [parse_think(v) for v in (None, True, "false", "HIGH", "low")] == [
        None,
        True,
        False,
        "high",
        "low",
    ]
    with pytest.raises(InvalidRequest, match="invalid think value"):
        parse_think("extreme")
