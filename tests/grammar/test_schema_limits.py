"""Hostile ``format`` schemas and forced tool lists: linear grammars, quick 400s, no escapes.

The sizes are the issue's reproductions scaled down (the old converter wrote
every later optional member into each alternative: O(n²·L) bytes, and recursed
once per member); each check also runs the grammar, so the smaller grammar is
proven to accept and refuse what the schema says.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from localllm.engine.engine import Engine
from localllm.errors import InvalidRequest
from localllm.grammar import schema_to_grammar
from localllm.grammar.json_schema import MAX_DEPTH, MAX_PROPERTIES
from localllm.grammar.rules import MAX_GRAMMAR_BYTES, MAX_SCHEMA_NODES
from localllm.grammar.tools import MAX_TOOLS, forced_tool_grammar
from localllm.runner.messages import Done
from tests.support.engine_steps import opts, sample_under
from tests.support.gbnf import accepts, parse_grammar
from tests.support.tinymodel import make_tiny_model


def optional_object(n: int, length: int, required: tuple[int, ...] = ()) -> dict[str, Any]:
    names = [f"p{i:04d}" + "x" * (length - 5) for i in range(n)]
    return {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in names},
        "required": [names[i] for i in required],
    }


def doc(keys: list[str]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {i}" for i, k in enumerate(keys)) + "}"


# -- the object's members: linear, exact --------------------------------------------------


def test_optional_properties_make_a_linear_grammar() -> None:
    sizes = {}
    for n in (150, 300):
        start = time.process_time()
        sizes[n] = len(schema_to_grammar(optional_object(n, 300)))
        assert time.process_time() - start < 1.0
    # Twice the members, twice the grammar (the old one was 4x: 3.7 MB -> 14.6 MB),
    # and about one name's worth of bytes per member, not n of them.
    assert sizes[300] < 2.2 * sizes[150]
    assert sizes[300] < 300 * (300 + 600)


def test_long_names_stay_whole_in_literals_and_short_in_rule_names() -> None:
    schema = optional_object(300, 300, required=(7,))
    names = list(schema["properties"])
    grammar = schema_to_grammar(schema)
    rules = parse_grammar(grammar)
    assert max(len(name) for name in rules) <= 64
    assert all(grammar.count(json.dumps(k)[1:-1]) == 1 for k in names)  # each name once
    assert accepts(grammar, doc([names[7]]))
    assert accepts(grammar, doc([names[0], names[7], names[150], names[299]]))
    assert accepts(grammar, doc([names[7], names[8], names[9]]))
    assert not accepts(grammar, doc([names[0], names[150]]))  # the required one is missing
    assert not accepts(grammar, doc([names[7], names[299], names[150]]))  # out of order
    assert not accepts(grammar, doc([names[7], names[7]]))  # twice
    assert not accepts(grammar, doc([names[7], names[8][:-1]]))  # not a property


@pytest.mark.parametrize("seed", range(4))
def test_every_subset_in_order_and_nothing_else(seed: int) -> None:
    # Small objects, every choice of members: exactly the ordered subsets holding the
    # required ones (and, with additionalProperties, extra members after them).
    rng = random.Random(seed)
    n = 6
    keys = [f"k{i}" for i in range(n)]
    required = {k for k in keys if rng.random() < 0.35}
    extra = seed % 2 == 1
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in keys},
        "required": sorted(required),
    }
    if extra:
        schema["additionalProperties"] = {"type": "integer"}
    grammar = schema_to_grammar(schema)
    for size in range(n + 1):
        for chosen in itertools.combinations(keys, size):
            want = required <= set(chosen)
            assert accepts(grammar, doc(list(chosen))) == want, chosen
            if want:
                assert accepts(grammar, doc([*chosen, "z1", "z2"])) == extra, chosen
            if len(chosen) > 1:
                assert not accepts(grammar, doc(list(reversed(chosen)))), chosen


def test_the_limit_on_properties_is_a_400_that_names_it() -> None:
    grammar = schema_to_grammar(optional_object(MAX_PROPERTIES, 20))
    assert parse_grammar(grammar) and f"p{MAX_PROPERTIES - 1:04d}" in grammar
    start = time.process_time()
    with pytest.raises(InvalidRequest, match=f"at most {MAX_PROPERTIES} properties") as info:
        schema_to_grammar(optional_object(MAX_PROPERTIES + 1, 20))
    assert info.value.status == 400 and time.process_time() - start < 0.5
    with pytest.raises(InvalidRequest, match=f"at most {MAX_PROPERTIES} properties"):
        schema_to_grammar({"properties": {"a": {}}, "required": ["a"] * (MAX_PROPERTIES + 1)})


@pytest.mark.parametrize(
    "schema",
    [
        # Nested objects whose names add up past the byte limit.
        {
            "type": "object",
            "properties": {f"o{j}": optional_object(MAX_PROPERTIES, 1000) for j in range(5)},
        },
        {"type": "object", "properties": {"x" * (MAX_GRAMMAR_BYTES + 1): {}}},
        {"const": "x" * (MAX_GRAMMAR_BYTES + 1)},
        {"enum": ["y" * 1000] * 5000},
        {"anyOf": [{"enum": ["z" * 1000] * 2000}] * 4},
        {"prefixItems": [{"const": "w" * 100_000}] * 50},
    ],
)
def test_the_limit_on_grammar_bytes_is_a_quick_400(schema: dict[str, Any]) -> None:
    # CPU time, not the wall clock: on a loaded machine the wall clock says how busy the
    # others are. Building the whole grammar before measuring it took 12 s of CPU.
    start = time.process_time()
    with pytest.raises(InvalidRequest, match=f"would be over {MAX_GRAMMAR_BYTES} bytes"):
        schema_to_grammar(schema)
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize(
    "schema",
    [
        {"anyOf": [{"type": "integer"}] * (MAX_SCHEMA_NODES + 1)},
        {"enum": list(range(MAX_SCHEMA_NODES + 1))},
        {"type": "string", **{f"x-{i}": i for i in range(MAX_SCHEMA_NODES + 1)}},
    ],
)
def test_the_limit_on_schema_nodes_is_a_quick_400(schema: dict[str, Any]) -> None:
    start = time.process_time()
    with pytest.raises(InvalidRequest, match=f"over {MAX_SCHEMA_NODES} nodes"):
        schema_to_grammar(schema)
    assert time.process_time() - start < 1.0


def test_unknown_keywords_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    schema = {
        "type": "object",
        "properties": {
            f"p{i}": {"type": "string", "pattern": "x", f"x-note-{i}": 1} for i in range(2000 // 2)
        },
    }
    with caplog.at_level(logging.WARNING, logger="localllm.grammar.json_schema"):
        schema_to_grammar(schema)
    records = [r for r in caplog.records if r.name == "localllm.grammar.json_schema"]
    assert len(records) == 1
    assert "'pattern'" in records[0].getMessage() and "x-note-" in records[0].getMessage()


# -- nothing recurses without bound -----------------------------------------------------------


def nested(depth: int, wrap: Any) -> Any:
    value: Any = {"type": "integer"}
    for _ in range(depth):
        value = wrap(value)
    return value


@pytest.mark.parametrize(
    "schema",
    [
        nested(5000, lambda s: {"anyOf": [s, {"type": "null"}]}),
        nested(5000, lambda s: {"type": "array", "items": s}),
        nested(5000, lambda s: {"allOf": [s]}),
        nested(5000, lambda s: {"properties": {"a": s}}),
        {
            "$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(5000)} | {"d5000": {}},
            "$ref": "#/$defs/d0",
        },
    ],
)
def test_deep_schemas_are_a_400(schema: Any) -> None:
    with pytest.raises(InvalidRequest, match=f"deeper than {MAX_DEPTH} levels"):
        schema_to_grammar(schema)


def test_deep_const_is_a_400_not_a_recursion_error() -> None:
    with pytest.raises(InvalidRequest, match="nests too deeply"):
        schema_to_grammar({"const": nested(5000, lambda v: [v])})
    with pytest.raises(InvalidRequest, match="not JSON"):
        schema_to_grammar({"enum": [{"a": {1, 2}}]})


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
        # The cycle closes through a $ref first resolved under an array, then reached bare.
        {
            "$defs": {
                "y": {
                    "anyOf": [
                        {"type": "array", "items": {"$ref": "#/$defs/x"}},
                        {"$ref": "#/$defs/x"},
                    ]
                },
                "x": {"allOf": [{"$ref": "#/$defs/y"}]},
            },
            "$ref": "#/$defs/y",
        },
    ],
)
def test_a_ref_cycle_matching_nothing_is_a_400(schema: Any) -> None:
    # llama.cpp refuses left recursion: say so up front, naming the $ref.
    with pytest.raises(InvalidRequest, match=r"\$ref '#.*' refers back to itself"):
        schema_to_grammar(schema)


def test_a_ref_cycle_through_an_object_is_fine() -> None:
    schema = {
        "$defs": {
            "a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]},
            "b": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/a"}},
                "required": ["next"],
            },
        },
        "$ref": "#/$defs/a",
    }
    grammar = schema_to_grammar(schema)
    assert accepts(grammar, '{"next": {"next": null}}')
    assert not accepts(grammar, '{"next": {}}')


def test_the_grammar_is_deterministic() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a" * 50: optional_object(40, 60),
            "b": {"anyOf": [optional_object(30, 30)] * 3},
        },
    }
    assert schema_to_grammar(schema) == schema_to_grammar(json.loads(json.dumps(schema)))


# -- forced tool calls ------------------------------------------------------------------------


def tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": schema}}


@pytest.mark.parametrize("template", ["<tool_call>", "<tool_call><function=<parameter="])
def test_tool_grammars_are_linear_and_bounded(template: str) -> None:
    small = forced_tool_grammar([tool("f", optional_object(150, 300))], template)
    large = forced_tool_grammar([tool("f", optional_object(300, 300))], template)
    assert small is not None and large is not None
    assert len(large[0]) < 2.2 * len(small[0]) and len(large[0]) < 300 * 900
    start = time.process_time()
    with pytest.raises(InvalidRequest, match=f"would be over {MAX_GRAMMAR_BYTES} bytes"):
        forced_tool_grammar(
            [tool(f"f{i}", optional_object(MAX_PROPERTIES, 1000)) for i in range(5)], template
        )
    assert time.process_time() - start < 1.0


def test_too_many_forced_tools_is_a_400() -> None:
    tools = [tool(f"f{i}", {"type": "object"}) for i in range(MAX_TOOLS + 1)]
    with pytest.raises(InvalidRequest, match=f"at most {MAX_TOOLS} tools"):
        forced_tool_grammar(tools, "<tool_call>")
    assert forced_tool_grammar(tools[:MAX_TOOLS], "<tool_call>") is not None


def test_xml_required_entries_that_are_not_names_are_ignored() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": [{}, "a"]}
    forced = forced_tool_grammar([tool("f", schema)], "<tool_call><function=<parameter=")
    assert forced is not None
    assert accepts(
        forced[0],
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
    )


# -- the real engine runs the linear grammar --------------------------------------------------


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    model = make_tiny_model(tmp_path_factory.mktemp("tiny-limits"))
    with Engine([str(model)], opts(n_ctx=2048)) as e:
        yield e


def generate(engine: Engine, grammar: str, seed: int) -> tuple[str, Done]:
    return sample_under(engine, grammar, f"l{seed}", seed, num_predict=1500)


@pytest.mark.parametrize("seed", range(3))
def test_engine_follows_a_many_member_grammar(engine: Engine, seed: int) -> None:
    names = [f"m{chr(97 + i // 26)}{chr(97 + i % 26)}" + "q" * 20 for i in range(120)]
    schema = {
        "type": "object",
        "properties": {k: {"type": "boolean"} for k in names},
        "required": [names[60]],
    }
    grammar = schema_to_grammar(schema)
    text, done = generate(engine, grammar, seed)
    assert done.reason == "stop", text
    got = list(json.loads(text))
    assert names[60] in got and got == sorted(got, key=names.index), text
    assert accepts(grammar, text)
