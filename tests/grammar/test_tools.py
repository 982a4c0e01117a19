"""The forced-call grammar per output format: what it generates parses back as a call.

For each format a template that teaches it is given; random walks over the grammar
(a GBNF generator over the test recogniser's parse tree) write calls for each tool,
which the recogniser accepts and the format's own parser reads back as that call.
"""

from __future__ import annotations

import pytest

from localllm.grammar.tools import forced_tool_grammar
from localllm.toolcalls import format_named
from tests.support.gbnf import accepts
from tests.support.tool_grammar import TOOLS, WEATHER, walks_parse_back

TEMPLATES = {
    "hermes": "<tool_call>",
    "llama3": "<|python_tag|>",
    "mistral": "[TOOL_CALLS][ARGS]",
    "mistral_nemo": "[TOOL_CALLS]",
    "gpt_oss": "<|channel|>",
    "deepseek_r1": "<｜tool▁calls▁begin｜>```json",
    "deepseek_v3_1": "<｜tool▁calls▁begin｜>",
    "kimi_k2": "<|tool_calls_section_begin|>",
    "granite": "<|tool_call|>",
    "command_r7b": "<|START_ACTION|>",
    "functionary_v3_2": ">>>all",
    "qwen3_coder": "<tool_call><function=<parameter=",
    "seed_oss": "<seed:tool_call>",
    "glm_4_5": "<tool_call><arg_key>",
}


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_generated_calls_parse_back(fmt: str) -> None:
    forced = forced_tool_grammar(TOOLS, TEMPLATES[fmt])
    assert forced is not None
    grammar, name = forced
    assert name == fmt
    walks_parse_back(grammar, lambda: format_named(name).parser(TOOLS, None))


def test_unknown_template_forces_hermes() -> None:
    forced = forced_tool_grammar([WEATHER], "{{ messages }}")
    assert forced is not None and forced[1] == "hermes"
    assert accepts(
        forced[0],
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "tokyo"}}\n</tool_call>',
    )


def test_refused_schema_leaves_the_call_unforced() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}
    assert forced_tool_grammar([tool], "<tool_call>") is None


def test_a_block_the_prompt_opened_may_be_closed_first() -> None:
    forced = forced_tool_grammar([WEATHER], "<think></think><tool_call>")
    assert forced is not None
    text = (
        '</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris"}}'
        "\n</tool_call>"
    )
    assert accepts(forced[0], text)
    parser = format_named(forced[1], "<think></think>").parser([WEATHER], None)
    got = parser.feed(text)
    got.extend(parser.finish())
    assert (got.content, [c.name for c in got.calls]) == ("", ["get_weather"])
