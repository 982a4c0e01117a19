"""Two tools (a closed enum, an open object) and random walks over a grammar's parse tree
(tests/support/gbnf.py): the calls a forced-call grammar generates, checked against the tools."""

from __future__ import annotations

import random
from typing import Any

from tests.support.gbnf import Alt, Cls, Lit, Node, Ref, Rep, Seq

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["paris", "tokyo"]}},
    "required": ["city"]}}}
COUNT = {"type": "function", "function": {"name": "count", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer"}, "label": {"type": "string"},
                                     "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["n"]}}}
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
    return "".join(generate(rules, node.node, rng, depth)
                   for _ in range(rng.randint(node.low, high)))


def check_args(name: str, args: dict[str, Any]) -> None:
    if name == "get_weather":
        assert args in ({"city": "paris"}, {"city": "tokyo"})
    else:
        assert isinstance(args["n"], int) and set(args) <= {"n", "label", "tags"}
        assert isinstance(args.get("label", ""), str)
        assert isinstance(args.get("tags", []), list)
