"""``format`` -> GBNF: Ollama's JSON mode and JSON Schema structured output.

The grammar is handed to llama.cpp's grammar sampler (``SamplingParams.grammar``,
root rule ``root``).  Every rule is written on one line.  Whitespace between
tokens is bounded (one space, or a newline plus a little indentation) and
numbers have a bounded number of digits, so a model can't loop forever inside
the grammar.  Keywords that only constrain values (``minimum``, ``format``,
``pattern``, ...) are not enforced: they are logged and the grammar is looser
than the schema.  Structure we can't express (``not``, ``if``, external
``$ref``) is refused with ``invalid format``.

Schemas arrive in request bodies, so the conversion is bounded (``rules``):
its size is linear in the schema (an object's optional members share one rule
per suffix instead of repeating the later members in every alternative), the
walk is capped in depth (``MAX_DEPTH``), nodes, properties per object
(``MAX_PROPERTIES``) and output bytes, and a ``$ref`` cycle that matches
nothing before recursing (left recursion, which llama.cpp refuses) is a 400.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from localllm.errors import InvalidRequest
from localllm.grammar.rules import (
    GrammarTooLarge,
    Rules,
    hint,
    left_cycle,
    literal,
    render_rules,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_PROPERTIES",
    "GrammarTooLarge",
    "SchemaConverter",
    "grammar_for_format",
    "json_grammar",
    "literal",
    "render_rules",
    "schema_to_grammar",
]

log = logging.getLogger(__name__)

MAX_REPEAT = 256  # larger {m,n} bounds would expand into huge grammars inside llama.cpp
MAX_DEPTH = 64
MAX_PROPERTIES = 1000
_INLINE = 80  # an object's member suffixes shorter than this are written in place, not named
_REF = re.compile(r"#/(\$defs|definitions)/([^/]+)")

_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Annotations that don't change what is valid.
_IGNORED = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "deprecated",
        "readOnly",
        "writeOnly",
        "nullable",
        "strict",
    }
)
_LOOSENED = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "format",
        "pattern",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "contentEncoding",
        "contentMediaType",
        "propertyNames",
        "contains",
        "minContains",
        "maxContains",
    }
)
_HANDLED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "$ref",
    }
)
_REFUSED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "dependentSchemas",
        "dependentRequired",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)


def invalid(why: str) -> InvalidRequest:
    return InvalidRequest(f"invalid format: {why}")


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


class SchemaConverter(Rules):
    """JSON Schema nodes to GBNF rules, collected in ``rules`` (shared with grammar/tools)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        super().__init__()
        self.root = root
        self.refs: dict[str, str] = {}
        # Left-recursion check: the $ref whose body is being walked with nothing matched
        # yet, and the $refs each one reaches that way.
        self._left: str | None = None
        self._left_edges: dict[str, set[str]] = {}
        self._unenforced: dict[str, str] = {}  # keyword -> where first seen (logged once)

    def finish(self) -> str:
        """The grammar text; refuses a left-recursive ``$ref`` cycle.  Logs what is loose."""
        cycle = left_cycle(self._left_edges)
        if cycle is not None:
            raise invalid(f"$ref {cycle!r} refers back to itself before matching anything")
        if self._unenforced:
            shown = sorted(self._unenforced.items())[:16]
            log.warning(
                "format: not enforced or unknown: %s%s",
                ", ".join(f"{k!r} (at {w})" for k, w in shown),
                " ..." if len(self._unenforced) > len(shown) else "",
            )
        return render_rules(self.rules)

    # -- schema walk ------------------------------------------------------------------
    def visit(self, schema: Any, where: str, depth: int = 0) -> str:
        """A GBNF expression for ``schema`` (a rule name or an inline alternation)."""
        if depth > MAX_DEPTH:
            raise invalid(f"schema nests deeper than {MAX_DEPTH} levels")
        if schema is True or (isinstance(schema, Mapping) and not schema):
            return self.use("value")
        if schema is False:
            raise invalid("a false schema matches nothing")
        if not isinstance(schema, Mapping):
            raise invalid(f"expected a schema object at {where!r}")
        self.walked(1 + len(schema))
        for key in schema:
            if key in _HANDLED or key in _IGNORED:
                continue
            if key in _REFUSED:
                raise invalid(f"{key!r} is not supported")
            self._unenforced.setdefault(str(key)[:64], where)
        if "$ref" in schema:
            return self.ref(schema["$ref"], depth)
        if "const" in schema:
            return self.json_literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise invalid("enum must be a non-empty array")
            self.walked(len(values))
            return "(" + self.join((self.json_literal(v) for v in values), " | ") + ")"
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.alternatives(schema[key], where, depth, key)
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or len(parts) != 1:
                raise invalid("allOf is supported with exactly one schema")
            return self.visit(parts[0], where, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind:
                raise invalid("type must not be an empty array")
            if not all(isinstance(k, str) for k in kind):
                raise invalid("type must name types")
            kinds = list(dict.fromkeys(kind))  # each type once: a repeated one adds nothing
            alts = [self.typed(dict(schema, type=k), where, depth) for k in kinds]
            return "(" + self.join(alts, " | ") + ")"
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                return self.use("value")
            return self.typed(dict(schema, type=kind), where, depth)
        return self.typed(schema, where, depth)

    def json_literal(self, value: Any) -> str:
        if isinstance(value, str):
            self.room(len(value))  # before encoding a text too long to fit
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except RecursionError:
            raise invalid("a const or enum value nests too deeply") from None
        except (TypeError, ValueError) as exc:
            raise invalid(f"a const or enum value is not JSON: {exc}") from None
        return self.lit(text)

    def alternatives(self, options: Any, where: str, depth: int, key: str) -> str:
        if not isinstance(options, list) or not options:
            raise invalid(f"{key} must be a non-empty array")
        alts = (self.visit(o, hint(where, str(i)), depth + 1) for i, o in enumerate(options))
        return "(" + self.join(alts, " | ") + ")"

    def ref(self, target: Any, depth: int) -> str:
        if not isinstance(target, str):
            raise invalid("$ref must be a string")
        if self._left is not None:
            self._left_edges.setdefault(self._left, set()).add(target)
        if target in self.refs:
            return self.refs[target]
        match = _REF.fullmatch(target)
        if target == "#":
            sub: Any = self.root
        elif match:
            defs = self.root.get(match.group(1))
            name = match.group(2).replace("~1", "/").replace("~0", "~")
            if not isinstance(defs, Mapping) or name not in defs:
                raise invalid(f"$ref {target[:200]!r} does not resolve")
            sub = defs[name]
        else:
            raise invalid(
                f"only local $ref to $defs/definitions is supported, got {target[:200]!r}"
            )
        # Reserve the name first so a recursive reference finds it.
        rule = self.fresh(target.rsplit("/", 1)[-1] if target != "#" else "root-ref")
        self.refs[target] = rule
        left, self._left = self._left, target
        try:
            self.set(rule, self.visit(sub, rule, depth + 1))
        finally:
            self._left = left
        return rule

    def typed(self, schema: Mapping[str, Any], where: str, depth: int) -> str:
        kind = schema.get("type")
        if kind not in _TYPES:
            raise invalid(f"unknown type {str(kind)[:64]!r}")
        if kind in ("object", "array"):
            # Both match "{" or "[" first, so a $ref below them is not left recursion.
            left, self._left = self._left, None
            try:
                if kind == "object":
                    return self.object(schema, where, depth)
                return self.array(schema, where, depth)
            finally:
                self._left = left
        if kind == "string" and ("minLength" in schema or "maxLength" in schema):
            low, high = _bounds(schema, "minLength", "maxLength")
            self.use("char")
            return f'"\\"" {_repeat("char", low, high)} "\\""'
        return self.use(str(kind))

    def object(self, schema: Mapping[str, Any], where: str, depth: int) -> str:
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, Mapping):
            raise invalid("properties must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise invalid("required must be an array of strings")
        if len(props) > MAX_PROPERTIES or len(required) > MAX_PROPERTIES:
            raise GrammarTooLarge(
                f"invalid format: an object may have at most {MAX_PROPERTIES} properties"
            )
        must = set(required)
        extra = schema.get("additionalProperties", not props)
        if not props and extra is True:
            return self.use("object")
        ws = self.use("ws")
        items: list[tuple[str, bool, bool]] = []  # (key-value rule, required, repeats)
        for key, sub in props.items():
            self.room(len(key))  # the name is written whole: refuse before hashing it
            child = hint(where, str(key))
            value = self.visit(sub, child, depth + 1)
            name = self.lit(json.dumps(key, ensure_ascii=False))
            kv = self.define(f"{child}-kv", f'{name} {ws} ":" {ws} {value} {ws}')
            items.append((kv, key in must, False))
        if extra is not False:
            value = self.visit(extra, f"{where}-additional", depth + 1)
            kv = self.define(
                f"{where}-additional-kv", f'{self.use("string")} {ws} ":" {ws} {value} {ws}'
            )
            items.append((kv, False, True))
        return self.define(where, f'"{{" {ws} {self.members(items, where)} "}}"')

    def members(self, items: list[tuple[str, bool, bool]], where: str) -> str:
        """Comma-separated members in schema order; required ones present, optional ones not.

        ``tail[i]``: members i.. after one has been written (each with its comma);
        ``head[i]``: members i.. when none has been written yet (the first has no
        comma).  Each is built from the next one by reference, as a rule of its own
        once it is longer than a few names, so the grammar is linear in the members.
        """
        ws = self.use("ws")
        tail, head = "", ""
        for i in range(len(items) - 1, -1, -1):
            kv, req, many = items[i]
            sep = f'"," {ws} {kv}'
            part = sep if req else (f"({sep})*" if many else f"({sep})?")
            first = f'{kv} ("," {ws} {kv})*' if many else kv
            this = f"{first} {tail}".strip()
            if req:
                head = this  # the members after a required one always follow it
            else:
                if len(head) > _INLINE:
                    head = self.define(f"{where}-head", head)
                head = f"({this} | {head})" if head else f"({this})?"
            tail = f"{part} {tail}".strip()
            if i and len(tail) > _INLINE:
                tail = self.define(f"{where}-tail", tail)
        return head

    def array(self, schema: Mapping[str, Any], where: str, depth: int) -> str:
        ws = self.use("ws")
        low, high = _bounds(schema, "minItems", "maxItems")
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if prefix is not None:
            if not isinstance(prefix, list):
                raise invalid("prefixItems must be an array")
            fixed: Iterable[str] = (
                f"{self.visit(p, hint(where, str(i)), depth + 1)} {ws}"
                for i, p in enumerate(prefix)
            )
            body = self.join(fixed, f' "," {ws} ')
            if items is not False:
                log.warning("format: items after prefixItems are not allowed (at %s)", where)
            return self.define(where, f'"[" {ws} {body} "]"' if body else f'"[" {ws} "]"')
        if items is False or high == 0:
            return self.define(where, f'"[" {ws} "]"')
        item = self.visit(items, f"{where}-item", depth + 1)
        more = _repeat(f'"," {ws} {item} {ws}', max(low - 1, 0), None if high is None else high - 1)
        body = f"{item} {ws} {more}"
        if low == 0:
            body = f"({body})?"
        return self.define(where, f'"[" {ws} {body} "]"')


def json_grammar() -> str:
    """Ollama's ``format: "json"``: a JSON object, whose values may be any JSON value."""
    conv = SchemaConverter({})
    conv.set("root", conv.use("object"))
    return render_rules(conv.rules)


def schema_to_grammar(schema: Mapping[str, Any]) -> str:
    """A GBNF grammar (root rule ``root``) accepting JSON documents valid for ``schema``."""
    if not isinstance(schema, Mapping):
        raise invalid("a JSON schema must be an object")
    conv = SchemaConverter(schema)
    conv.set("root", "")  # reserve the name
    try:
        conv.set("root", conv.visit(schema, "root-value"))
    except RecursionError:  # a safety net: MAX_DEPTH keeps the walk far from the limit
        raise invalid("schema nests too deeply") from None
    return conv.finish()


def grammar_for_format(fmt: Any) -> str | None:
    """The grammar for a request's ``format`` field; ``None`` when there is no format."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return json_grammar()
    if isinstance(fmt, Mapping):
        return schema_to_grammar(fmt)
    raise InvalidRequest('invalid format: expected "json" or a valid JSON schema')
