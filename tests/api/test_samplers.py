"""The sampler options past Ollama's (api/samplers.py): accepted, checked, never dropped.

How the engine applies them is tested in tests/engine/test_samplers.py; here, that
each reaches ``SamplingParams`` as sent (OpenAI and llama-server forms alike), and
that what cannot be applied is a 400 naming it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from localllm.compat.openai.request import chat_request_to_native, completion_request_to_native
from localllm.errors import InvalidRequest
from localllm.inference.options import resolve_options
from localllm.inference.shaping import grammar_for


def sampling(options: dict[str, Any], params: dict[str, Any] | None = None) -> Any:
    return resolve_options(params, options).sampling


def test_defaults_are_llama_cpp_s_and_off() -> None:
    s = sampling({})
    assert s.logit_bias == [] and s.mirostat == 0 and s.top_n_sigma == -1.0
    assert (s.xtc_probability, s.xtc_threshold) == (0.0, 0.1)
    assert (s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_penalty_last_n) == (
        0.0,
        1.75,
        2,
        64,
    )
    assert s.dry_sequence_breakers == ["\n", ":", '"', "*"]
    assert (s.mirostat_tau, s.mirostat_eta) == (5.0, 0.1)


def test_every_sampler_option_reaches_the_engine() -> None:
    sent = {
        "mirostat": 2,
        "mirostat_tau": 3.0,
        "mirostat_eta": 0.2,
        "top_n_sigma": 1.5,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.2,
        "dry_multiplier": 0.8,
        "dry_base": 2.0,
        "dry_allowed_length": 3,
        "dry_penalty_last_n": -1,
        "dry_sequence_breakers": ["\n", "###"],
    }
    s = sampling(sent)
    assert {k: getattr(s, k) for k in sent} == sent


@pytest.mark.parametrize(
    ("sent", "want"),
    [
        ({"15": 100, "7": -100}, [(15, 100.0), (7, -100.0)]),  # OpenAI's object
        ([[15, 5], ["hello", -2.5]], [(15, 5.0), ("hello", -2.5)]),  # llama-server's pairs
        ({"hello": 1, "-3": 1}, [("hello", 1.0), (-3, 1.0)]),  # -3: an id (the engine refuses)
        ('{"15": 1}', [(15, 1.0)]),  # JSON text, as a PARAMETER holds it
        ({}, []),
    ],
)
def test_logit_bias_forms(sent: object, want: list[tuple[object, float]]) -> None:
    assert sampling({"logit_bias": sent}).logit_bias == want


def test_false_bans_a_token() -> None:
    ((tok, bias),) = sampling({"logit_bias": {"15": False}}).logit_bias
    assert tok == 15 and bias == -math.inf


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"logit_bias": {"15": 101}}, "between -100 and 100"),
        ({"logit_bias": {"15": True}}, "numbers"),
        ({"logit_bias": {"15": "x"}}, "numbers"),
        ({"logit_bias": [[15]]}, "pairs"),
        ({"logit_bias": 3}, "logit_bias"),
        ({"logit_bias": "{not json"}, "JSON"),
        ({"logit_bias": {str(i): 1 for i in range(1025)}}, "at most 1024"),
        ({"logit_bias": {"x" * 1001: 1}}, "1000 characters"),
        ({"mirostat": 3}, "mirostat"),
        ({"mirostat_tau": -1}, "mirostat_tau"),
        ({"xtc_probability": 1.5}, "xtc_probability"),
        ({"xtc_threshold": -0.1}, "xtc_threshold"),
        ({"dry_multiplier": -1}, "dry_multiplier"),
        ({"dry_multiplier": 0.8, "dry_base": 0.5}, "dry_base"),
        ({"dry_allowed_length": -1}, "dry_allowed_length"),
        ({"dry_penalty_last_n": -2}, "dry_penalty_last_n"),
        ({"dry_sequence_breakers": ["x" * 41]}, "40 bytes"),
        ({"dry_sequence_breakers": [str(i) for i in range(33)]}, "at most 32"),
        ({"dry_sequence_breakers": 5}, "dry_sequence_breakers"),
        ({"top_n_sigma": "1"}, "top_n_sigma"),
    ],
)
def test_what_cannot_be_applied_is_a_400_naming_it(options: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        sampling(options)


def test_a_dry_window_past_the_context_is_the_whole_context() -> None:
    s = sampling({"num_ctx": 512, "dry_penalty_last_n": 100_000})
    assert s.dry_penalty_last_n == -1
    assert sampling({"num_ctx": 512, "dry_penalty_last_n": 512}).dry_penalty_last_n == 512


def test_model_parameters_set_samplers_from_text() -> None:
    s = sampling({}, {"mirostat": "2", "logit_bias": '{"15": -100}', "dry_multiplier": "0.8"})
    assert (s.mirostat, s.logit_bias, s.dry_multiplier) == (2, [(15, -100.0)], 0.8)
    assert sampling({"mirostat": 0}, {"mirostat": "2"}).mirostat == 0  # the request wins


def test_openai_bodies_carry_logit_bias_grammar_and_llama_server_samplers() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "logit_bias": {"15": 100},
        "grammar": 'root ::= "x"',
        "top_k": 5,
        "min_p": 0.1,
        "dry_multiplier": 0.8,
        "xtc_probability": 0.3,
        "mirostat": 2,
        "options": {"top_k": 9, "top_n_sigma": 1.0},
    }
    conv = chat_request_to_native(body)  # type: ignore[arg-type]
    opts = conv.native["options"]
    assert conv.native["grammar"] == 'root ::= "x"'
    assert opts["logit_bias"] == {"15": 100} and opts["top_k"] == 5  # top level wins
    assert (opts["min_p"], opts["dry_multiplier"], opts["xtc_probability"]) == (0.1, 0.8, 0.3)
    assert opts["mirostat"] == 2 and opts["top_n_sigma"] == 1.0
    assert conv.ignored == []  # none of them is logged as ignored
    done = completion_request_to_native(
        {"model": "m", "prompt": "a", "logit_bias": {"3": -100}, "grammar": "root ::= [a-z]"}
    )
    assert done.native["options"]["logit_bias"] == {"3": -100}
    assert done.native["grammar"] == "root ::= [a-z]"
    with pytest.raises(InvalidRequest, match="grammar"):
        chat_request_to_native({**body, "grammar": 5})  # type: ignore[typeddict-item]


def test_grammar_beside_format() -> None:
    assert grammar_for(None, 'root ::= "x"') == 'root ::= "x"'
    assert grammar_for("", 'root ::= "x"') == 'root ::= "x"'
    assert grammar_for(None, "") is None
    with pytest.raises(InvalidRequest, match="format and grammar"):
        grammar_for("json", 'root ::= "x"')
    with pytest.raises(InvalidRequest, match="grammar is over"):
        grammar_for(None, "x" * ((4 << 20) + 1))
