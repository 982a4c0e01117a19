"""``format`` -> GBNF: Ollama's JSON mode and JSON Schema structured output.

The grammar is handed to llama.cpp's grammar sampler (``SamplingParams.grammar``,
root rule ``root``).  Every rule is written on one line.  Whitespace between
tokens is bounded (one space, or a newline plus a little indentation) and
numbers have a bounded number of digits, so a model can't loop forever inside
the grammar.  Keywords that only constrain values (``minimum``, ``format``,
``pattern``, ...) are not enforced: they are logged and the grammar is looser
than the schema.  Structure we can't express (``not``, ``if``, external
``$ref``) is refused with ``invalid format``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from localllm.errors import InvalidRequest

log = logging.getLogger(__name__)

MAX_REPEAT = 256  # larger {m,n} bounds would expand into huge grammars inside llama.cpp
MAX_DEPTH = 64
MAX_RULES = 4096

_PRIMITIVES: dict[str, str] = {
    "ws": '(" " | "\\n" [ \\t]{0,16})?',
    # A surrogate pair escape is one character, as JSON Schema lengths count code points.
    "char": ('[^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})'
             ' | "\\\\u" [dD] [89abAB] [0-9a-fA-F]{2} "\\\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}'),
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
    "string": ("char",), "number": ("integer",),
    "value": ("object", "array", "string", "number", "boolean", "null"),
    "object": ("ws", "string", "value"), "array": ("ws", "value"),
}
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Annotations that don't change what is valid.
_IGNORED = frozenset({"title", "description", "default", "examples", "$schema", "$id",
                      "$comment", "$defs", "definitions", "deprecated", "readOnly",
                      "writeOnly", "nullable", "strict"})
_LOOSENED = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                       "multipleOf", "format", "pattern", "uniqueItems", "minProperties",
                       "maxProperties", "contentEncoding", "contentMediaType",
                       "propertyNames", "contains", "minContains", "maxContains"})
_HANDLED = frozenset({"type", "properties", "required", "additionalProperties", "enum",
                      "const", "anyOf", "oneOf", "allOf", "items", "prefixItems", "minItems",
                      "maxItems", "minLength", "maxLength", "$ref"})


def invalid(why: str) -> InvalidRequest:
    return InvalidRequest(f"invalid format: {why}")


def literal(text: str) -> str:
    """A GBNF string literal matching ``text`` exactly."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _repeat(item: str, low: int, high: int | None) -> str:
    """``item`` repeated low..high times (high None = unbounded)."""
    if high is None:
        return f"({item})*" if low == 0 else f"({item}){{{low},}}"
    if high == low:
        return f"({item}){{{low}}}"
    return f"({item}){{{low},{high}}}"


def _count(schema: Mapping[str, Any], key: str) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(f"{key} must be a non-negative integer")
    return value


def _bounds(schema: Mapping[str, Any], low_key: str, high_key: str) -> tuple[int, int | None]:
    low = _count(schema, low_key) or 0
    high = _count(schema, high_key)
    if high is not None and high < low:
        raise invalid(f"{high_key} is less than {low_key}")
    if low > MAX_REPEAT:
        raise invalid(f"{low_key} larger than {MAX_REPEAT} is not supported")
    if high is not None and high > MAX_REPEAT:
        log.warning("format: %s %d not enforced (over %d)", high_key, high, MAX_REPEAT)
        high = None
    return low, high


class SchemaConverter:
    """JSON Schema nodes to GBNF rules, collected in ``rules`` (shared with grammar/tools)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.rules: dict[str, str] = {}
        self.refs: dict[str, str] = {}

    # -- rule bookkeeping -------------------------------------------------------------
    def use(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _PRIMITIVES[name]
            for dep in _DEPENDS.get(name, ()):
                self.use(dep)
        return name

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-").lower() or "rule"
        name, n = base, 1
        while name in self.rules or name in _PRIMITIVES:
            n += 1
            name = f"{base}-{n}"
        if len(self.rules) >= MAX_RULES:
            raise invalid("schema is too large")
        self.rules[name] = ""  # reserved; filled by the caller
        return name

    def define(self, hint: str, body: str) -> str:
        name = self.fresh(hint)
        self.rules[name] = body
        return name

    # -- schema walk ------------------------------------------------------------------
    def visit(self, schema: Any, hint: str, depth: int = 0) -> str:
        """A GBNF expression for ``schema`` (a rule name or an inline alternation)."""
        if depth > MAX_DEPTH:
            raise invalid("schema nests too deeply")
        if schema is True or schema == {}:
            return self.use("value")
        if schema is False:
            raise invalid("a false schema matches nothing")
        if not isinstance(schema, Mapping):
            raise invalid(f"expected a schema object at {hint!r}")
        for key in schema:
            if key in _LOOSENED:
                log.warning("format: %r is not enforced (at %s)", key, hint)
            elif key not in _IGNORED and key not in _HANDLED:
                if key in ("not", "if", "then", "else", "patternProperties",
                           "dependentSchemas", "dependentRequired", "unevaluatedProperties",
                           "unevaluatedItems"):
                    raise invalid(f"{key!r} is not supported")
                log.warning("format: ignoring unknown keyword %r (at %s)", key, hint)
        if "$ref" in schema:
            return self.ref(schema["$ref"], depth)
        if "const" in schema:
            return _json_literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise invalid("enum must be a non-empty array")
            return "(" + " | ".join(_json_literal(v) for v in values) + ")"
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.alternatives(schema[key], hint, depth, key)
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or len(parts) != 1:
                raise invalid("allOf is supported with exactly one schema")
            return self.visit(parts[0], hint, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind:
                raise invalid("type must not be an empty array")
            alts = [self.typed(dict(schema, type=k), hint, depth) for k in kind]
            return "(" + " | ".join(alts) + ")"
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                return self.use("value")
            return self.typed(dict(schema, type=kind), hint, depth)
        return self.typed(schema, hint, depth)

    def alternatives(self, options: Any, hint: str, depth: int, key: str) -> str:
        if not isinstance(options, list) or not options:
            raise invalid(f"{key} must be a non-empty array")
        alts = [self.visit(o, f"{hint}-{i}", depth + 1) for i, o in enumerate(options)]
        return "(" + " | ".join(alts) + ")"

    def ref(self, target: Any, depth: int) -> str:
        if not isinstance(target, str):
            raise invalid("$ref must be a string")
        if target in self.refs:
            return self.refs[target]
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", target)
        if target == "#":
            sub: Any = self.root
        elif match:
            defs = self.root.get(match.group(1))
            name = match.group(2).replace("~1", "/").replace("~0", "~")
            if not isinstance(defs, Mapping) or name not in defs:
                raise invalid(f"$ref {target!r} does not resolve")
            sub = defs[name]
        else:
            raise invalid(f"only local $ref to $defs/definitions is supported, got {target!r}")
        # Reserve the name first so a recursive reference finds it.
        rule = self.fresh(target.rsplit("/", 1)[-1] if target != "#" else "root-ref")
        self.refs[target] = rule
        self.rules[rule] = self.visit(sub, rule, depth + 1)
        return rule

    def typed(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        kind = schema.get("type")
        if kind not in _TYPES:
            raise invalid(f"unknown type {kind!r}")
        if kind == "object":
            return self.object(schema, hint, depth)
        if kind == "array":
            return self.array(schema, hint, depth)
        if kind == "string" and ("minLength" in schema or "maxLength" in schema):
            low, high = _bounds(schema, "minLength", "maxLength")
            self.use("char")
            return f'"\\"" {_repeat("char", low, high)} "\\""'
        return self.use(str(kind))

    def object(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, Mapping):
            raise invalid("properties must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise invalid("required must be an array of strings")
        extra = schema.get("additionalProperties", not props)
        if not props and extra is True:
            return self.use("object")
        ws = self.use("ws")
        items: list[tuple[str, bool, bool]] = []  # (key-value rule, required, repeats)
        for key, sub in props.items():
            value = self.visit(sub, f"{hint}-{key}", depth + 1)
            name = literal(json.dumps(key, ensure_ascii=False))
            kv = self.define(f"{hint}-{key}-kv", f'{name} {ws} ":" {ws} {value} {ws}')
            items.append((kv, key in required, False))
        if extra is not False:
            value = self.visit(extra, f"{hint}-additional", depth + 1)
            kv = self.define(f"{hint}-additional-kv",
                             f'{self.use("string")} {ws} ":" {ws} {value} {ws}')
            items.append((kv, False, True))
        return self.define(hint, f'"{{" {ws} {self.members(items)} "}}"')

    def members(self, items: list[tuple[str, bool, bool]]) -> str:
        """Comma-separated members in schema order; required ones present, optional ones not."""
        def tail(i: int) -> str:
            parts = []
            for kv, req, many in items[i:]:
                sep = f'"," {self.use("ws")} {kv}'
                parts.append(sep if req else (f"({sep})*" if many else f"({sep})?"))
            return " ".join(parts)

        def head(i: int) -> str:
            if i == len(items):
                return ""
            kv, req, many = items[i]
            first = f'{kv} ("," {self.use("ws")} {kv})*' if many else kv
            rest = tail(i + 1)
            this = f"{first} {rest}".strip()
            if req:
                return this
            other = head(i + 1)
            return f"({this} | {other})" if other else f"({this})?"

        return head(0)

    def array(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        ws = self.use("ws")
        low, high = _bounds(schema, "minItems", "maxItems")
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if prefix is not None:
            if not isinstance(prefix, list):
                raise invalid("prefixItems must be an array")
            fixed = [self.visit(p, f"{hint}-{i}", depth + 1) for i, p in enumerate(prefix)]
            if items is not False:
                log.warning("format: items after prefixItems are not allowed (at %s)", hint)
            body = f' "," {ws} '.join(f"{f} {ws}" for f in fixed)
            return self.define(hint, f'"[" {ws} {body} "]"' if fixed else f'"[" {ws} "]"')
        if items is False or high == 0:
            return self.define(hint, f'"[" {ws} "]"')
        item = self.visit(items, f"{hint}-item", depth + 1)
        more = _repeat(f'"," {ws} {item} {ws}', max(low - 1, 0),
                       None if high is None else high - 1)
        body = f"{item} {ws} {more}"
        if low == 0:
            body = f"({body})?"
        return self.define(hint, f'"[" {ws} {body} "]"')


def render_rules(rules: Mapping[str, str]) -> str:
    """The rules as a GBNF grammar text, ``root`` first."""
    ordered = ["root", *(name for name in rules if name != "root")]
    return "".join(f"{name} ::= {rules[name]}\n" for name in ordered)


def json_grammar() -> str:
    """Ollama's ``format: "json"``: a JSON object, whose values may be any JSON value."""
    conv = SchemaConverter({})
    conv.rules["root"] = conv.use("object")
    return render_rules(conv.rules)


def schema_to_grammar(schema: Mapping[str, Any]) -> str:
    """A GBNF grammar (root rule ``root``) accepting JSON documents valid for ``schema``."""
    if not isinstance(schema, Mapping):
        raise invalid("a JSON schema must be an object")
    conv = SchemaConverter(schema)
    conv.rules["root"] = ""  # reserve the name
    conv.rules["root"] = conv.visit(schema, "root-value")
    return render_rules(conv.rules)


def grammar_for_format(fmt: Any) -> str | None:
    """The grammar for a request's ``format`` field; ``None`` when there is no format."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return json_grammar()
    if isinstance(fmt, Mapping):
        return schema_to_grammar(fmt)
    raise InvalidRequest('invalid format: expected "json" or a valid JSON schema')
