"""Generation on the tiny model: exact greedy text, stops, limits, seeds, UTF-8, logprobs."""

from __future__ import annotations

import math

import pytest

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import run_one
from tests.support.tinymodel import (
    GREEDY,
    LOOP_PROMPT,
    N_VOCAB,
    SHARPNESS,
    expected_greedy,
    tokenize as tiny_tokenize,
)

GREEDY_P = SamplingParams(temperature=0.0)


def req(prompt: str | list[int], id: str = "r", **kw: object) -> CompletionRequest:
    kw.setdefault("sampling", GREEDY_P)
    return CompletionRequest(id=id, prompt=prompt, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("prompt", "expected"), list(GREEDY.items()))
def test_greedy_text_is_exact(engine: Engine, prompt: str, expected: str) -> None:
    r = run_one(engine, req(prompt))
    assert r.text == expected
    assert r.done is not None and r.done.reason == "stop"


def test_eog_ends_with_stop_and_context(engine: Engine) -> None:
    r = run_one(engine, req("x"))
    assert r.done is not None
    assert (r.done.reason, r.done.eval_count, r.done.prompt_tokens) == ("stop", 2, 2)
    assert r.done.context == engine.tokenize("xyz")
    assert r.done.eval_ns > 0 and r.done.prompt_eval_ns > 0


def test_num_predict_limits_tokens(engine: Engine) -> None:
    r = run_one(engine, req("a", num_predict=5))
    assert r.text == "bcdef"
    assert r.done is not None and (r.done.reason, r.done.eval_count) == ("length", 5)


def test_stop_string_is_never_emitted(engine: Engine) -> None:
    r = run_one(engine, req("a", stop=["xyz", "ghi"]))
    assert r.text == "bcdef"
    assert r.done is not None and r.done.reason == "stop"
    assert r.done.stop == "ghi"  # the stop string that matched, for Anthropic's stop_sequence
    assert all("g" not in p.text for p in r.pieces)


def test_partial_stop_match_is_released(engine: Engine) -> None:
    # "gx" starts matching at "g" and fails at "h": the held "g" must still come out.
    r = run_one(engine, req("a", stop=["gx"]))
    assert r.text == GREEDY["a"]
    assert r.done is not None and r.done.reason == "stop"


def test_stop_at_the_very_start(engine: Engine) -> None:
    r = run_one(engine, req("a", stop=["b"]))
    assert r.text == ""
    assert r.done is not None and r.done.reason == "stop" and r.done.eval_count == 1


def test_utf8_split_over_tokens_is_never_broken(engine: Engine) -> None:
    r = run_one(engine, req("0", logprobs=1))  # logprobs: one Piece per token
    texts = [p.text for p in r.pieces]
    assert texts[:2] == ["", "é"]  # <0xC3> held until <0xA9>
    assert texts[-3:] == ["", "", "€"]
    assert "".join(texts) == GREEDY["0"]
    assert all("\ufffd" not in t for t in texts)


def test_seeded_sampling_is_reproducible(engine: Engine) -> None:
    def sample(seed: int) -> str:
        p = SamplingParams(temperature=3.0, top_k=0, top_p=1.0, seed=seed)
        return run_one(engine, req(LOOP_PROMPT, sampling=p, num_predict=30)).text

    a, b, c = sample(42), sample(42), sample(7)
    assert a == b
    assert a != c
    assert a != "A" * 30  # temperature really sampled


def test_greedy_logprobs(engine: Engine) -> None:
    r = run_one(engine, req("a", num_predict=3, logprobs=2))
    first = r.pieces[0]
    expect = SHARPNESS - math.log(math.exp(SHARPNESS) + N_VOCAB - 1)
    assert first.logprob == pytest.approx(expect, abs=1e-3)
    assert first.top_logprobs is not None and first.top_logprobs[0][0] == "b"
    assert first.top_logprobs[0][1] == pytest.approx(expect, abs=1e-3)
    assert first.top_logprobs[1][1] < first.top_logprobs[0][1]


def test_grammar_constrains_output(engine: Engine) -> None:
    p = SamplingParams(temperature=0, grammar='root ::= "q" "r"')
    r = run_one(engine, req("a", sampling=p))
    assert r.text == "qr"
    assert r.done is not None and r.done.reason == "stop"


def test_bad_grammar_fails_the_request_only(engine: Engine) -> None:
    r = run_one(engine, req("a", sampling=SamplingParams(grammar="root ::= (((")))
    assert r.failed is not None and r.failed.status == 400
    assert run_one(engine, req("x")).text == "yz"  # the engine carries on


def test_penalties_break_a_loop(engine: Engine) -> None:
    plain = run_one(engine, req(LOOP_PROMPT, num_predict=4)).text
    p = SamplingParams(temperature=0, presence_penalty=20.0, repeat_last_n=64)
    pen = run_one(engine, req(LOOP_PROMPT, num_predict=4, sampling=p)).text
    assert plain == "AAAA"
    assert not pen.startswith("A")


def test_token_prompt_and_bad_token(engine: Engine) -> None:
    assert run_one(engine, req(engine.tokenize("x"))).text == "yz"
    r = run_one(engine, req([1, 10_000]))
    assert r.failed is not None and r.failed.status == 400


def test_num_predict_zero_evaluates_prompt_only(engine: Engine) -> None:
    r = run_one(engine, req("abc", num_predict=0))
    assert r.text == ""
    assert r.done is not None and r.done.eval_count == 0 and r.done.prompt_tokens == 4


def test_tiny_model_helpers_agree_with_llama_cpp(engine: Engine) -> None:
    for prompt in ["", "hello é€", "Ab.9", "x y"]:
        assert engine.tokenize(prompt) == tiny_tokenize(prompt)
    for prompt, text in GREEDY.items():
        assert expected_greedy(prompt) == text
    assert expected_greedy("0", 2) == "é" and expected_greedy("0", 1) == ""


def test_timings_include_the_last_step(engine: Engine) -> None:
    """Done is built inside the last step; its decode time must already be counted."""
    one = run_one(engine, req("a", id="one", num_predict=1))
    assert one.done is not None and one.done.prompt_eval_ns > 0
    two = run_one(engine, req("k", id="two", num_predict=2))
    assert two.done is not None and two.done.prompt_eval_ns > 0 and two.done.eval_ns > 0


def test_greedy_fast_path_matches_the_chain_with_penalty_off_and_on(engine: Engine) -> None:
    # repeat_penalty != 1 keeps llama.cpp's full chain; 1.0 takes the argmax shortcut.
    plain = run_one(engine, req("hello", id="p"))
    chained = run_one(
        engine,
        req(
            "hello",
            id="c",
            sampling=SamplingParams(temperature=0.0, repeat_penalty=1.0001, repeat_last_n=4),
        ),
    )
    assert plain.text == chained.text == GREEDY["hello"]
