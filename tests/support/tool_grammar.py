"""Two tools (a closed enum, an open object) and random walks over a grammar's parse tree
(tests/support/gbnf.py): the calls a forced-call grammar generates, checked against the tools."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from localllm.toolcalls.base import FormatParser
from tests.support.gbnf import Alt, Cls, Lit, Node, Ref, Rep, Seq, accepts, parse_grammar

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["paris", "tokyo"]}},
            "required": ["city"],
        },
    },
}
COUNT = {
    "type": "function",
    "function": {
        "name": "count",
        "parameters": {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "label": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["n"],
        },
    },
}
TOOLS = [WEATHER, COUNT]
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
    return "".join(
        generate(rules, node.node, rng, depth) for _ in range(rng.randint(node.low, high))
    )


def check_args(name: str, args: dict[str, Any]) -> None:
    if name == "get_weather":
        assert args in ({"city": "paris"}, {"city": "tokyo"})
    else:
        assert isinstance(args["n"], int) and set(args) <= {"n", "label", "tags"}
        assert isinstance(args.get("label", ""), str)
        assert isinstance(args.get("tags", []), list)


def walks_parse_back(grammar: str, new_parser: Callable[[], FormatParser]) -> None:
    """25 random walks over ``grammar``, each accepted by the recogniser and read back by a
    fresh ``new_parser()`` as exactly one call with arguments of its tool's schema; between
    them, both tools are called."""
    rules = parse_grammar(grammar)
    names = set()
    for seed in range(25):
        text = generate(rules, rules["root"], random.Random(seed))
        assert accepts(grammar, text), text
        parser = new_parser()
        got = parser.feed(text)
        got.extend(parser.finish())
        assert got.content.strip() == "" and len(got.calls) == 1, text
        call = got.calls[0]
        names.add(call.name)
        check_args(call.name, call.arguments)
    assert names == {"get_weather", "count"}
