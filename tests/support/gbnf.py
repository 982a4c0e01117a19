"""A small GBNF parser and recogniser for tests: does a grammar accept a whole string?

Supports what our grammars use: one rule per line, string literals, character
classes (with ``^``, ranges and ``\\x``/``\\u`` escapes), groups, ``|``, and
the postfix operators ``* + ?`` and ``{m}``, ``{m,}``, ``{m,n}``.  Matching
computes, for each expression and start position, the set of end positions
(memoised per rule), which is fine for the short documents the tests use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Union

Node = Union["Lit", "Cls", "Ref", "Seq", "Alt", "Rep"]


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    negated: bool
    ranges: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    node: Node
    low: int
    high: int | None


_ESC = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "\\": "\\",
    '"': '"',
    "[": "[",
    "]": "]",
    "-": "-",
    "/": "/",
    "^": "^",
}


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def skip(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def char(self) -> str:
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = self.s[self.i + 1]
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            code = int(self.s[self.i + 2 : self.i + 2 + n], 16)
            self.i += 2 + n
            return chr(code)
        self.i += 2
        return _ESC[e]

    def alt(self) -> Node:
        options = [self.seq()]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            options.append(self.seq())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def seq(self) -> Node:
        items: list[Node] = []
        while True:
            self.skip()
            if self.i >= len(self.s) or self.s[self.i] in "|)":
                break
            items.append(self.postfix(self.atom()))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def atom(self) -> Node:
        c = self.s[self.i]
        if c == '"':
            self.i += 1
            out = []
            while self.s[self.i] != '"':
                out.append(self.char())
            self.i += 1
            return Lit("".join(out))
        if c == "[":
            self.i += 1
            negated = self.s[self.i] == "^"
            if negated:
                self.i += 1
            ranges = []
            while self.s[self.i] != "]":
                lo = self.char()
                hi = lo
                if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                    self.i += 1
                    hi = self.char()
                ranges.append((lo, hi))
            self.i += 1
            return Cls(negated, tuple(ranges))
        if c == "(":
            self.i += 1
            node = self.alt()
            assert self.s[self.i] == ")", self.s[self.i :]
            self.i += 1
            return node
        start = self.i
        while self.i < len(self.s) and (self.s[self.i].isalnum() or self.s[self.i] == "-"):
            self.i += 1
        assert self.i > start, f"unexpected {self.s[self.i :]!r}"
        return Ref(self.s[start : self.i])

    def postfix(self, node: Node) -> Node:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "*+?":
                self.i += 1
                node = Rep(node, 0 if c != "+" else 1, 1 if c == "?" else None)
            elif c == "{":
                end = self.s.index("}", self.i)
                spec = self.s[self.i + 1 : end]
                self.i = end + 1
                if "," in spec:
                    lo, hi = spec.split(",")
                    node = Rep(node, int(lo), int(hi) if hi.strip() else None)
                else:
                    node = Rep(node, int(spec), int(spec))
            else:
                break
        return node


def parse_grammar(text: str) -> dict[str, Node]:
    rules: dict[str, Node] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, body = line.split("::=", 1)
        p = _Parser(body)
        node = p.alt()
        assert p.i == len(body), f"trailing text in rule {name}: {body[p.i :]!r}"
        rules[name.strip()] = node
    for node in rules.values():
        _check_refs(node, rules)
    return rules


def _check_refs(node: Node, rules: dict[str, Node]) -> None:
    if isinstance(node, Ref):
        assert node.name in rules, f"undefined rule {node.name}"
    elif isinstance(node, (Seq, Alt)):
        for sub in node.items if isinstance(node, Seq) else node.options:
            _check_refs(sub, rules)
    elif isinstance(node, Rep):
        _check_refs(node.node, rules)


def accepts(grammar: str, text: str) -> bool:
    rules = parse_grammar(grammar)

    @functools.cache
    def rule_ends(name: str, pos: int) -> frozenset[int]:
        return frozenset(ends(rules[name], pos))

    def ends(node: Node, pos: int) -> set[int]:
        if isinstance(node, Lit):
            return {pos + len(node.text)} if text.startswith(node.text, pos) else set()
        if isinstance(node, Cls):
            if pos >= len(text):
                return set()
            c = text[pos]
            hit = any(lo <= c <= hi for lo, hi in node.ranges)
            return {pos + 1} if hit != node.negated else set()
        if isinstance(node, Ref):
            return set(rule_ends(node.name, pos))
        if isinstance(node, Seq):
            frontier = {pos}
            for item in node.items:
                frontier = {e for p in frontier for e in ends(item, p)}
                if not frontier:
                    break
            return frontier
        if isinstance(node, Alt):
            return {e for o in node.options for e in ends(o, pos)}
        frontier = {pos}
        for _ in range(node.low):
            frontier = {e for p in frontier for e in ends(node.node, p)}
        # Past the minimum, a position seen before can't lead anywhere new (it had at
        # least as many repetitions left then), so explore only fresh positions.
        result = set(frontier)
        extra = None if node.high is None else node.high - node.low
        while frontier and (extra is None or extra > 0):
            frontier = {e for p in frontier for e in ends(node.node, p)} - result
            result |= frontier
            if extra is not None:
                extra -= 1
        return result

    return len(text) in rule_ends("root", 0)
