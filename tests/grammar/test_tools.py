"""The forced-call grammar per output format: what it generates parses back as a call.

For each format a template that teaches it is given; random walks over the grammar
(a GBNF generator over the test recogniser's parse tree) write calls for each tool,
which the recogniser accepts and the format's own parser reads back as that call.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from localllm.grammar.tools import forced_tool_grammar
from localllm.toolcalls import format_named
from tests.grammar.gbnf import Alt, Cls, Lit, Node, Ref, Rep, Seq, accepts, parse_grammar

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["paris", "tokyo"]}},
    "required": ["city"]}}}
COUNT = {"type": "function", "function": {"name": "count", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer"}, "label": {"type": "string"},
                                     "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["n"]}}}
TOOLS = [WEATHER, COUNT]
TEMPLATES = {
    "hermes": "<tool_call>", "llama3": "<|python_tag|>", "mistral": "[TOOL_CALLS][ARGS]",
    "mistral_nemo": "[TOOL_CALLS]", "gpt_oss": "<|channel|>",
    "deepseek_r1": "<｜tool▁calls▁begin｜>```json", "deepseek_v3_1": "<｜tool▁calls▁begin｜>",
    "kimi_k2": "<|tool_calls_section_begin|>", "granite": "<|tool_call|>",
    "command_r7b": "<|START_ACTION|>", "functionary_v3_2": ">>>all",
    "qwen3_coder": "<tool_call><function=<parameter=", "seed_oss": "<seed:tool_call>",
    "glm_4_5": "<tool_call><arg_key>",
}
_SAFE = "abz 19"


def generate(rules: dict[str, Node], node: Node, rng: random.Random, depth: int = 0) -> str:
    deep = depth > 6  # past this, the shortest choices, so the walk ends
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Cls):
        if node.negated:
            bad = {c for lo, hi in node.ranges for c in _SAFE if lo <= c <= hi}
            return rng.choice([c for c in _SAFE if c not in bad])
        lo, hi = rng.choice(node.ranges)
        return chr(rng.randint(ord(lo), ord(hi)))
    if isinstance(node, Ref):
        return generate(rules, rules[node.name], rng, depth + 1)
    if isinstance(node, Seq):
        return "".join(generate(rules, item, rng, depth) for item in node.items)
    if isinstance(node, Alt):
        option = node.options[-1] if deep else rng.choice(node.options)
        return generate(rules, option, rng, depth)
    assert isinstance(node, Rep)
    high = node.low if deep else min(node.high if node.high is not None else 2, node.low + 2)
    return "".join(generate(rules, node.node, rng, depth)
                   for _ in range(rng.randint(node.low, high)))


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_generated_calls_parse_back(fmt: str) -> None:
    forced = forced_tool_grammar(TOOLS, TEMPLATES[fmt])
    assert forced is not None
    grammar, name = forced
    assert name == fmt
    rules = parse_grammar(grammar)
    names = set()
    for seed in range(25):
        text = generate(rules, rules["root"], random.Random(seed))
        assert accepts(grammar, text), text
        parser = format_named(name).parser(TOOLS, None)
        got = parser.feed(text)
        got.extend(parser.finish())
        assert got.content.strip() == "" and len(got.calls) == 1, text
        call = got.calls[0]
        names.add(call.name)
        check_args(call.name, call.arguments)
    assert names == {"get_weather", "count"}


def check_args(name: str, args: dict[str, Any]) -> None:
    if name == "get_weather":
        assert args in ({"city": "paris"}, {"city": "tokyo"})
    else:
        assert isinstance(args["n"], int) and set(args) <= {"n", "label", "tags"}
        assert isinstance(args.get("label", ""), str)
        assert isinstance(args.get("tags", []), list)


def test_unknown_template_forces_hermes() -> None:
    forced = forced_tool_grammar([WEATHER], "{{ messages }}")
    assert forced is not None and forced[1] == "hermes"
    assert accepts(forced[0], '<tool_call>\n{"name": "get_weather", "arguments": '
                              '{"city": "tokyo"}}\n</tool_call>')


def test_refused_schema_leaves_the_call_unforced() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}
    assert forced_tool_grammar([tool], "<tool_call>") is None


def test_a_block_the_prompt_opened_may_be_closed_first() -> None:
    forced = forced_tool_grammar([WEATHER], "<think></think><tool_call>")
    assert forced is not None
    text = ('</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris"}}'
            "\n</tool_call>")
    assert accepts(forced[0], text)
    parser = format_named(forced[1], "<think></think>").parser([WEATHER], None)
    got = parser.feed(text)
    got.extend(parser.finish())
    assert (got.content, [c.name for c in got.calls]) == ("", ["get_weather"])
