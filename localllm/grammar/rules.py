"""The rule table a grammar is built in: short unique rule names, and the grammar's budget.

Schemas and tool lists come from request bodies (up to the body limit), so
everything that grows the grammar is counted here as it is made: the bytes of
the rules (``MAX_GRAMMAR_BYTES``), the number of rules (``MAX_RULES``) and the
schema nodes and keywords walked (``MAX_SCHEMA_NODES``).  Crossing one raises
:class:`GrammarTooLarge` (HTTP 400) naming the limit, early, before the work it
would take is done.  Rule names are made from the schema path but never carry a
long property name: long parts are cut and hashed, so a name stays short however
long or deep the keys are (the keys themselves appear whole, once, in the
string literals of the grammar).

A table is used by one conversion only (it is not shared between threads).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from localllm.errors import InvalidRequest

MAX_GRAMMAR_BYTES = 4 << 20
MAX_RULES = 65536
MAX_SCHEMA_NODES = 100_000
_NAME_PART = 24  # longer parts of a rule name are cut and hashed
_NAME_MAX = 40
_UNSAFE = re.compile(r"[^a-zA-Z0-9-]+")

_PRIMITIVES: dict[str, str] = {
    "ws": '(" " | "\\n" [ \\t]{0,16})?',
    # A surrogate pair escape is one character, as JSON Schema lengths count code points.
    "char": (
        '[^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})'
        ' | "\\\\u" [dD] [89abAB] [0-9a-fA-F]{2} "\\\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}'
    ),
    "string": '"\\"" char* "\\""',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,15})',
    "number": 'integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"',
    "array": '"[" ws (value ws ("," ws value ws)*)? "]"',
}
_DEPENDS: dict[str, tuple[str, ...]] = {
    "string": ("char",),
    "number": ("integer",),
    "value": ("object", "array", "string", "number", "boolean", "null"),
    "object": ("ws", "string", "value"),
    "array": ("ws", "value"),
}
PRIMITIVES = frozenset(_PRIMITIVES)

# GBNF string-literal escapes; str.translate does the whole text in C.
_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}
_ESCAPES.update(
    {ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}
)


class GrammarTooLarge(InvalidRequest):
    """A schema or tool list whose grammar would pass one of the limits above (HTTP 400)."""


def literal(text: str) -> str:
    """A GBNF string literal matching ``text`` exactly."""
    return '"' + text.translate(_ESCAPES) + '"'


def name_part(text: str) -> str:
    """``text`` as a piece of a rule name: short texts as they are, long ones cut and hashed."""
    if len(text) <= _NAME_PART:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{text[:12]}-{digest}"


def _short(base: str) -> str:
    if len(base) <= _NAME_MAX:
        return base
    # The start says which part of the schema, the end which member; the hash keeps
    # names apart (fresh() still makes sure they are unique).
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[:10].strip('-')}-{digest}-{base[-20:].strip('-')}"


class Rules:
    """GBNF rules by name, with the budget of the grammar they will make."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self.size = 0  # bytes of the rules written so far
        self.nodes = 0  # schema nodes and keywords walked so far
        self._next: dict[str, int] = {}  # per base name: the next suffix to try

    # -- budget -----------------------------------------------------------------------
    def walked(self, count: int) -> None:
        """Count ``count`` schema nodes or keywords walked."""
        self.nodes += count
        if self.nodes > MAX_SCHEMA_NODES:
            raise GrammarTooLarge(
                f"invalid format: the schema has over {MAX_SCHEMA_NODES} nodes and keywords"
            )

    def room(self, size: int) -> None:
        """Refuse before making ``size`` more bytes of grammar that would not fit."""
        if self.size + size > MAX_GRAMMAR_BYTES:
            raise GrammarTooLarge(
                f"invalid format: the grammar would be over {MAX_GRAMMAR_BYTES} bytes"
            )

    def join(self, parts: Iterable[str], sep: str) -> str:
        """``sep.join(parts)``, refused as soon as it could no longer fit the grammar."""
        out: list[str] = []
        total = 0
        for part in parts:
            total += len(part) + len(sep)
            self.room(total)
            out.append(part)
        return sep.join(out)

    def lit(self, text: str) -> str:
        """:func:`literal`, refused before the work if it could not fit the grammar."""
        self.room(len(text) + 2)
        return literal(text)

    # -- rules --------------------------------------------------------------------------
    def set(self, name: str, body: str) -> None:
        """Write (or rewrite) rule ``name``, counting its bytes."""
        old = self.rules.get(name)
        delta = len(name) + len(body) + 5 - (0 if old is None else len(name) + len(old) + 5)
        self.room(delta)
        if old is None and len(self.rules) >= MAX_RULES:
            raise GrammarTooLarge(f"invalid format: the grammar would have over {MAX_RULES} rules")
        self.size += delta
        self.rules[name] = body

    def use(self, name: str) -> str:
        """A primitive rule (``string``, ``value``, ...), added with what it needs."""
        if name not in self.rules:
            self.set(name, _PRIMITIVES[name])
            for dep in _DEPENDS.get(name, ()):
                self.use(dep)
        return name

    def fresh(self, hint: str) -> str:
        """A new rule name made from ``hint`` (reserved with an empty body)."""
        base = _short(_UNSAFE.sub("-", hint).strip("-").lower() or "rule")
        name, n = base, self._next.get(base, 1)
        if n > 1:
            name = f"{base}-{n}"
        while name in self.rules or name in _PRIMITIVES:
            n += 1
            name = f"{base}-{n}"
        self._next[base] = n
        self.set(name, "")
        return name

    def define(self, hint: str, body: str) -> str:
        name = self.fresh(hint)
        self.set(name, body)
        return name


def hint(parent: str, part: str) -> str:
    """The hint for a child of ``parent`` (itself a hint) named ``part``: bounded in length."""
    return _short(f"{parent}-{name_part(part)}")


def render_rules(rules: Mapping[str, str]) -> str:
    """The rules as a GBNF grammar text, ``root`` first."""
    ordered = ["root", *(name for name in rules if name != "root")]
    return "".join(f"{name} ::= {rules[name]}\n" for name in ordered)


def left_cycle(edges: Mapping[str, Iterable[str]]) -> str | None:
    """A node of ``edges`` that reaches itself (iteratively: graphs may be long), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if start in state:
            continue
        stack = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            nxt = next(todo, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return nxt
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(edges.get(nxt, ()))))
    return None
