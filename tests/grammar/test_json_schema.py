"""Tests for localllm.grammar: golden grammars, random valid documents, rejected invalid ones."""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import pytest

from localllm.errors import InvalidRequest
from localllm.grammar import grammar_for_format, json_grammar, schema_to_grammar
from tests.support.gbnf import accepts, parse_grammar

# -- golden grammars ----------------------------------------------------------------------


def test_golden_simple_object() -> None:
    g = schema_to_grammar(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["name"],
        }
    )
    lines = g.splitlines()
    assert lines[0] == "root ::= root-value"
    assert 'root-value-name-kv ::= "\\"name\\"" ws ":" ws string ws' in lines
    assert 'root-value-n-kv ::= "\\"n\\"" ws ":" ws integer ws' in lines
    assert 'root-value ::= "{" ws root-value-name-kv ("," ws root-value-n-kv)? "}"' in lines
    assert 'ws ::= (" " | "\\n" [ \\t]{0,16})?' in lines


def test_golden_enum_and_const() -> None:
    assert schema_to_grammar({"enum": ["a", 1, None]}) == 'root ::= ("\\"a\\"" | "1" | "null")\n'
    assert schema_to_grammar({"const": {"k": [1, "x"]}}) == 'root ::= "{\\"k\\":[1,\\"x\\"]}"\n'


def test_golden_primitives() -> None:
    assert schema_to_grammar({"type": "boolean"}).splitlines()[0] == "root ::= boolean"
    assert (
        schema_to_grammar({"type": ["string", "null"]}).splitlines()[0]
        == "root ::= (string | null)"
    )


def test_json_mode_is_object_at_root() -> None:
    g = json_grammar()
    assert g.startswith("root ::= object\n")
    assert grammar_for_format("json") == g
    assert accepts(g, '{"a": [1, {"b": null}], "c": "d"}')
    for bad in ("[]", '"x"', "1", "", "{", '{"a": 1} x', "{'a': 1}"):
        assert not accepts(g, bad), bad


def test_format_dispatch() -> None:
    assert grammar_for_format(None) is None
    assert grammar_for_format("") is None
    assert grammar_for_format({"type": "integer"}) is not None
    for bad in ("xml", ["json"], 3, True):
        with pytest.raises(InvalidRequest, match="invalid format"):
            grammar_for_format(bad)


def test_whitespace_is_bounded() -> None:
    g = json_grammar()
    assert accepts(g, '{\n    "a": 1\n}')
    assert accepts(g, "{" + "\n" + " " * 16 + '"a": 1}')
    assert not accepts(g, "{" + "\n" + " " * 17 + '"a": 1}')
    assert not accepts(g, '{  "a": 1}')  # two spaces without a newline
    assert not accepts(g, '{"a": 1' + "1" * 20 + "}")  # unbounded digits


# -- random documents -----------------------------------------------------------------------

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "age": {"type": "integer"},
            "score": {"type": "number"},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "kind": {"enum": ["cat", "dog"]},
            "nothing": {"type": "null"},
        },
        "required": ["name", "kind"],
    },
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "integer"},
            "c": {"type": "integer"},
        },
    },
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["value", "children"],
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "type": "array",
        "items": {
            "anyOf": [
                {"type": "integer"},
                {"type": "string"},
                {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
            ]
        },
        "minItems": 2,
        "maxItems": 4,
    },
    {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
        "additionalProperties": {"type": "boolean"},
    },
    {
        "type": "object",
        "properties": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
            },
            "label": {"oneOf": [{"const": "origin"}, {"type": "null"}]},
            "v": {"type": ["integer", "string"]},
        },
        "required": ["point", "label", "v"],
    },
    {
        "definitions": {"s": {"type": "string", "maxLength": 3}},
        "type": "object",
        "properties": {"s": {"$ref": "#/definitions/s"}},
        "required": ["s"],
    },
]

_CHARS = 'abcXYZ09 é中"\\\n\t/😀'


def generate(schema: Any, root: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    if schema is True or schema == {}:
        return rng.choice([1, "x", None, {"k": [True]}])
    if "$ref" in schema:
        section, name = schema["$ref"].split("/")[1:]
        return generate(root[section][name], root, rng, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return generate(rng.choice(schema[key]), root, rng, depth + 1)
    kind = schema["type"]
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind == "object":
        out: dict[str, Any] = {}
        for key, sub in schema.get("properties", {}).items():
            if key in schema.get("required", []) or rng.random() < 0.5:
                out[key] = generate(sub, root, rng, depth + 1)
        extra = schema.get("additionalProperties", False)
        if extra is not False:
            for i in range(rng.randint(0, 2)):
                out[f"extra{i}"] = generate(extra, root, rng, depth + 1)
        return out
    if kind == "array":
        low, high = schema.get("minItems", 0), schema.get("maxItems", 4)
        count = rng.randint(low, high) if depth < 3 else low
        return [generate(schema.get("items", {}), root, rng, depth + 1) for _ in range(count)]
    if kind == "string":
        n = rng.randint(schema.get("minLength", 0), schema.get("maxLength", 6))
        return "".join(rng.choice(_CHARS) for _ in range(n))
    if kind == "integer":
        return rng.choice([0, -1, 7, 123456789, -42])
    if kind == "number":
        return rng.choice([0, 1.5, -0.25, 3e-7, 1e21, 42])
    if kind == "boolean":
        return rng.random() < 0.5
    assert kind == "null"
    return None


def render(doc: Any, rng: random.Random) -> str:
    style = rng.randrange(4)
    if style == 0:
        return json.dumps(doc, separators=(",", ":"))
    if style == 1:
        return json.dumps(doc)
    if style == 2:
        return json.dumps(doc, indent=2, ensure_ascii=False)
    return json.dumps(doc, indent="\t", ensure_ascii=False)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_random_valid_documents_are_accepted(index: int) -> None:
    schema = SCHEMAS[index]
    grammar = schema_to_grammar(schema)
    parse_grammar(grammar)  # every referenced rule is defined
    rng = random.Random(index)
    for _ in range(40):
        text = render(generate(schema, schema, rng), rng)
        assert accepts(grammar, text), text


@pytest.mark.parametrize(
    ("index", "bad"),
    [
        (0, {"kind": "cat"}),  # missing required
        (0, {"name": "", "kind": "cat"}),  # minLength
        (0, {"name": "abcdefghi", "kind": "cat"}),  # maxLength
        (0, {"name": "a", "kind": "cow"}),  # not in enum
        (0, {"name": "a", "kind": "cat", "age": 1.5}),  # integer expected
        (0, {"name": "a", "kind": "cat", "tags": ["a"] * 4}),  # maxItems
        (0, {"name": "a", "kind": "cat", "extra": 1}),  # additionalProperties false
        (0, {"kind": "cat", "name": "a"}),  # properties in schema order
        (1, {"a": 1, "a ": 2}),
        (1, {"b": 1, "a": 2}),
        (2, {"value": 1, "children": [{"value": 2}]}),  # recursion keeps required
        (3, [1]),  # minItems
        (3, [1, 2, 3, 4, 5]),  # maxItems
        (3, [1, {"y": 1}]),
        (4, {"id": 1, "x": "no"}),  # additional must be boolean
        (5, {"point": {"x": 1, "y": 2}, "label": "elsewhere", "v": 1}),
        (5, {"point": {"x": 1, "y": 2}, "label": None, "v": True}),
        (6, {"s": "long"}),
    ],
)
def test_invalid_documents_are_rejected(index: int, bad: Any) -> None:
    grammar = schema_to_grammar(SCHEMAS[index])
    assert not accepts(grammar, json.dumps(bad))


def test_empty_object_and_optional_only() -> None:
    g = schema_to_grammar(SCHEMAS[1])
    for text in ("{}", '{"c": 3}', '{"a": 1, "c": 3}', '{ "a": 1,\n  "b": 2, "c": 3 }'):
        assert accepts(g, text), text
    for text in ('{,"c": 3}', '{"a": 1,}', '{"a": 1 "b": 2}'):
        assert not accepts(g, text), text


def test_object_without_properties_is_any_object() -> None:
    g = schema_to_grammar({"type": "object"})
    assert accepts(g, '{"anything": [1, 2]}')
    assert not accepts(g, "[1]")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "strin"},
        {"type": []},
        {"enum": []},
        {"anyOf": []},
        {"not": {"type": "string"}},
        {"$ref": "#/$defs/missing"},
        {"$ref": "https://example.com/s.json"},
        {"type": "array", "minItems": -1},
        {"type": "array", "minItems": 3, "maxItems": 2},
        {"type": "string", "maxLength": "5"},
        {"type": "object", "properties": []},
        {"type": "object", "required": "a"},
        {"allOf": [{"type": "string"}, {"minLength": 1}]},
        {"type": "array", "minItems": 100000},
        False,
    ],
)
def test_unsupported_or_invalid_schemas(schema: Any) -> None:
    with pytest.raises(InvalidRequest, match="invalid format"):
        grammar_for_format(schema) if schema is False else schema_to_grammar(schema)


def test_loosened_keywords_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="localllm.grammar.json_schema"):
        g = schema_to_grammar({"type": "string", "pattern": "^[a-z]+$", "format": "date"})
    assert "pattern" in caplog.text and "format" in caplog.text
    assert accepts(g, '"2024-01-01"')


def test_huge_max_items_is_not_expanded() -> None:
    g = schema_to_grammar({"type": "array", "items": {"type": "integer"}, "maxItems": 10**9})
    assert "{" not in g.split("\n")[0] and accepts(g, "[1, 2, 3]")
