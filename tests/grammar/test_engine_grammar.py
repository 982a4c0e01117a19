"""The real engine, sampling under our grammars, only ever produces valid documents.

Uses the engine's tiny generated model (tests/support/tinymodel.py) at temperature 1
with several seeds: the model's own preferences are irrelevant under a
grammar, so this checks that llama.cpp parses our GBNF and that what it lets
through is JSON our schema accepts and ends by itself (bounded whitespace and
numbers, so the grammar finishes and EOS ends the generation).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from localllm.engine.engine import Engine
from localllm.grammar import json_grammar, schema_to_grammar
from localllm.runner.messages import CompletionRequest, Done, SamplingParams
from tests.support.engine_steps import opts, run_one, sample_under
from tests.support.gbnf import accepts
from tests.support.tinymodel import BOS, UNK, make_tiny_model, tokenize

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer"},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["cat", "dog", None]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "pos": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    },
    "required": ["name", "kind", "pos"],
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    model = make_tiny_model(tmp_path_factory.mktemp("tiny-grammar"))
    with Engine([str(model)], opts(n_ctx=1024)) as e:
        yield e


def generate(engine: Engine, grammar: str, seed: int) -> tuple[str, Done]:
    return sample_under(engine, grammar, f"g{seed}", seed, num_predict=900)


def check(doc: dict[str, Any]) -> None:
    assert list(doc)[:1] == ["name"] and len(doc["name"]) <= 6
    assert doc["kind"] in ("cat", "dog", None)
    assert isinstance(doc["pos"]["x"], (int, float)) and list(doc["pos"]) == ["x"]
    assert set(doc) <= set(SCHEMA["properties"])
    if "age" in doc:
        assert isinstance(doc["age"], int) and not isinstance(doc["age"], bool)
    if "ok" in doc:
        assert isinstance(doc["ok"], bool)
    if "tags" in doc:
        assert len(doc["tags"]) <= 2 and all(len(t) <= 3 for t in doc["tags"])


@pytest.mark.parametrize("seed", range(6))
def test_schema_output_is_valid(engine: Engine, seed: int) -> None:
    grammar = schema_to_grammar(SCHEMA)
    text, done = generate(engine, grammar, seed)
    assert done.reason == "stop", text
    check(json.loads(text))
    assert accepts(grammar, text)


def test_json_mode_output_is_an_object(engine: Engine) -> None:
    grammar = json_grammar()
    for seed in range(3):
        text, done = generate(engine, grammar, 100 + seed)
        if done.reason == "stop":  # JSON mode is unbounded; a finished one must parse
            assert isinstance(json.loads(text), dict)
        else:  # cut by num_predict (an endless string): still an object being written
            assert text.startswith("{") and "\n\n" not in text


def test_a_grammar_never_lets_unk_or_bos_through(engine: Engine) -> None:
    """llama.cpp's grammar reads ``<unk>`` and ``<s>`` as their written-out text, which the
    reply never shows: greedy under the JSON grammar, the tiny model (whose successors the
    grammar mostly refuses, leaving ties) wrote ``<unk>`` into a string until its context
    ended.  The shim bans both, and any token holding a NUL byte, whenever a grammar runs."""
    sampling = SamplingParams(temperature=0.0, grammar=json_grammar())
    r = run_one(
        engine, CompletionRequest(id="unk", prompt="hello", sampling=sampling, num_predict=40)
    )
    assert r.failed is None and r.done is not None
    generated = r.done.context[len(tokenize("hello")) :]
    assert generated and UNK not in generated and BOS not in generated, generated
