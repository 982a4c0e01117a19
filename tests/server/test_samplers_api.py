"""The samplers past Ollama's through the real daemon: the openai SDK's ``logit_bias``,
Ollama's ``options``, llama-server's top-level fields and ``grammar`` beside ``format``.

On the tiny model (tests/support/tinymodel.py) "a" continues "bcd...", and "A" repeats
for ever, so each setting's effect shows in the text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from localllm.grammar.json_schema import grammar_for_format
from tests.support.daemon import Daemon
from tests.support.tinymodel import LOOP_PROMPT, token_id
from tests.support.variants import openai_client, serve_shared

X, C = token_id("x"), token_id("c")
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 1}


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serve_shared(tmp_path_factory, names=("tiny", "tiny-plain")) as daemon:
        yield daemon


def generate(d: Daemon, **body: Any) -> httpx.Response:
    body = {"model": "tiny", "prompt": "a", "raw": True, "stream": False, **body}
    return httpx.post(d.url + "/api/generate", json=body, timeout=60, trust_env=False)


def text(d: Daemon, **body: Any) -> str:
    r = generate(d, **body)
    assert r.status_code == 200, r.text
    return str(r.json()["response"])


def chat(d: Daemon, **kw: Any) -> str:
    c = openai_client(d)
    r = c.chat.completions.create(
        model="tiny-plain", messages=[{"role": "user", "content": "a"}], max_tokens=5, **kw
    )
    return r.choices[0].message.content or ""


def test_openai_sdk_logit_bias_forces_and_bans(d: Daemon) -> None:
    assert chat(d, **GREEDY) == "bcdef"
    assert chat(d, logit_bias={str(X): 100}, **GREEDY) == "xxxxx"
    banned = chat(d, logit_bias={str(C): -100}, **GREEDY)
    assert banned.startswith("b") and "c" not in banned
    # Sampled (OpenAI's defaults: temperature 1, top_p 1): still forced.
    assert chat(d, logit_bias={str(X): 100}, seed=4) == "xxxxx"
    c = openai_client(d)
    done = c.completions.create(
        model="tiny", prompt="a", max_tokens=4, logit_bias={str(X): 100}, temperature=0, seed=1
    )
    assert done.choices[0].text == "xxxx"


def test_openai_refuses_a_bias_outside_its_range(d: Daemon) -> None:
    with pytest.raises(openai.BadRequestError, match="between -100 and 100"):
        chat(d, logit_bias={str(X): 101}, **GREEDY)
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        chat(d, logit_bias={"999999": 5}, **GREEDY)  # not in the vocabulary


def test_ollama_options_bias_and_dry(d: Daemon) -> None:
    opts = {"temperature": 0, "num_predict": 5}
    assert text(d, options={**opts, "logit_bias": {str(X): 100}}) == "xxxxx"
    assert text(d, options={**opts, "logit_bias": [["x", 100]]}) == "xxxxx"  # a text key
    banned = text(d, options={**opts, "logit_bias": {str(C): -100}})
    assert banned.startswith("b") and "c" not in banned
    loop = {"temperature": 0, "num_predict": 20}
    assert text(d, prompt=LOOP_PROMPT, options=loop) == "A" * 20
    broken = text(d, prompt=LOOP_PROMPT, options={**loop, "dry_multiplier": 0.8})
    assert broken.count("A") < 12


def test_llama_server_top_level_samplers_on_chat(d: Daemon) -> None:
    # top_n_sigma 1 keeps only the top token: a hot chain gives the greedy text.
    hot = {"temperature": 2.0, "top_p": 1.0}
    extra = {"top_k": 0, "top_n_sigma": 1.0}
    assert all(chat(d, seed=s, **hot, extra_body=extra) == "bcdef" for s in range(3))
    assert any(chat(d, seed=s, **hot, extra_body={"top_k": 0}) != "bcdef" for s in range(3))
    assert chat(d, extra_body={"dry_multiplier": 0.8, "mirostat": 2}, **GREEDY) == "bcdef"


def test_grammar_gives_what_format_gives(d: Daemon) -> None:
    schema: dict[str, Any] = {"type": "string", "enum": ["abc", "xyz"]}
    opts = {"temperature": 0, "num_predict": 12}
    by_format = text(d, format=schema, options=opts)
    by_grammar = text(d, grammar=grammar_for_format(schema), options=opts)
    assert by_grammar == by_format and json.loads(by_format) in ("abc", "xyz")
    gbnf = "root ::= [a-c]+"  # "a" goes on "bcd...": "b", "c", then only the end
    assert text(d, grammar=gbnf, options=opts) == "bc"
    assert chat(d, extra_body={"grammar": gbnf}, **GREEDY) == "bc"
    c = openai_client(d)
    r = c.chat.completions.create(
        model="tiny-plain",
        messages=[{"role": "user", "content": "a"}],
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
        max_tokens=12,
        temperature=0,
        seed=1,
    )
    assert r.choices[0].message.content == by_format


def test_grammar_errors_are_400s(d: Daemon) -> None:
    both = generate(d, format="json", grammar='root ::= "x"')
    assert both.status_code == 400 and "format and grammar" in both.json()["error"]
    bad = generate(d, grammar="root ::= (")
    assert bad.status_code == 400 and "grammar" in bad.json()["error"]
    r = generate(d, options={"mirostat": 5})
    assert r.status_code == 400 and "mirostat" in r.json()["error"]
