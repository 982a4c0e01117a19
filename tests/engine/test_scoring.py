"""Scoring options after a prompt (engine/scoring.py) on the tiny models, through libllama.

Every sum is checked against the same option generated alone, in a fresh engine, under a
grammar that forces its text: the logprobs the engine reports for each generated token
(from the raw logits) are the independent computation.  The attention model makes every
logprob depend on the whole context, so a branch that saw another branch's tokens, or
lost part of the prompt, moves the numbers.  How many tokens each decode held proves the
prompt is read once and the branches share one decode.

Every engine here runs without flash attention: llama.cpp's CPU flash-attention kernel
sums over the cache's cells in their order, so where earlier requests left cells moves a
logprob by up to 6e-5 (measured: the same question after another one, 5.6e-5; with
flash attention off the two agree to the last bit, and each sum equals its forced
generation's exactly).  That is placement, not scoring.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.compat.systemone import probabilities
from localllm.engine.engine import Engine
from localllm.engine.scoring import MAX_OPTION_TOKENS
from localllm.errors import InvalidRequest, ServerBusy
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run_one
from tests.support.tinymodel import LOOP_PROMPT

PROMPT = "user:is the parcel late? answer.assistant:"
EXACT = {"flash_attn": "off", "n_ctx": 256}  # see the module doc
OPTIONS = ["yes", "no", "maybe", "y"]  # one char a token: 3, 2, 5 and 1 tokens


def forced(model: Path, prompt: str, option: str) -> float:
    """``log P(option | prompt)`` from a generation forced to ``option``'s tokens, alone
    in a fresh engine: the sum of its tokens' reported logprobs.  The grammar names the
    token ids (``<[id]>``): a text literal would let the sampler take a byte-fallback
    token that spells the same character, which is another answer."""
    with Engine([str(model)], opts(**EXACT)) as e:
        ids = e.tokenize(option, False, False)
        grammar = "root ::= " + " ".join(f"<[{t}]>" for t in ids)
        sampling = SamplingParams(temperature=0.0, grammar=grammar)
        req = CompletionRequest(
            id="x", prompt=prompt, sampling=sampling, num_predict=len(ids), logprobs=1
        )
        r = run_one(e, req)
    assert r.failed is None and [p.token for p in r.pieces] == ids
    return sum(p.logprob for p in r.pieces if p.logprob is not None)


class Decodes:
    """Wraps an engine's ``ctx.decode``: the token count of every decode it runs."""

    def __init__(self, engine: Engine) -> None:
        self.sizes: list[int] = []
        inner = engine.ctx.decode

        def decode(batch: object) -> int:
            self.sizes.append(len(batch))  # type: ignore[arg-type]
            return inner(batch)  # type: ignore[arg-type]

        engine.ctx.decode = decode  # type: ignore[method-assign]


@pytest.fixture
def four(tiny_attn: Path) -> Iterator[Engine]:
    with Engine([str(tiny_attn)], opts(n_parallel=4, **EXACT)) as e:
        yield e


def test_each_option_scores_as_its_forced_generation(four: Engine, tiny_attn: Path) -> None:
    (got,), read, _ = four.score([PROMPT], [OPTIONS])
    want = [forced(tiny_attn, PROMPT, o) for o in OPTIONS]
    assert read == len(PROMPT) + 1  # one token a character, and BOS
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-6)
    # Normalised over the options: exact to 1e-6 against the independent sums.
    for p, q in zip(probabilities(got), probabilities(want), strict=True):
        assert p == pytest.approx(q, abs=1e-6)
    assert sum(probabilities(got)) == pytest.approx(1.0, abs=1e-12)
    # Options differ in their numbers: the test would see two branches mixed up.
    assert len({round(g, 3) for g in got}) == len(got)


def test_the_prompt_is_read_once_and_the_branches_share_one_decode(four: Engine) -> None:
    decodes = Decodes(four)
    _, read, evaluated = four.score([PROMPT], [OPTIONS])
    # The prompt, then every option's tokens but its last: yes 2, no 1, maybe 4, y none.
    assert decodes.sizes == [read, 2 + 1 + 4]
    assert evaluated == read + 7
    # Again: the prompt is in a slot already; only its last token is read again.
    decodes.sizes.clear()
    _, _, evaluated = four.score([PROMPT], [OPTIONS])
    assert decodes.sizes == [1, 7] and evaluated == 8


def test_fewer_slots_than_branches_take_more_decodes_same_numbers(
    four: Engine, tiny_attn: Path
) -> None:
    (want,), _, _ = four.score([PROMPT], [OPTIONS])
    with Engine([str(tiny_attn)], opts(n_parallel=2, **EXACT)) as two:
        decodes = Decodes(two)
        (got,), read, _ = two.score([PROMPT], [OPTIONS])
        # Two branches, then the third: the prompt is still read once.
        assert decodes.sizes == [read, 2 + 1, 4]
    assert got == pytest.approx(want, abs=1e-6)
    with Engine([str(tiny_attn)], opts(n_parallel=1, **EXACT)) as one:
        (alone,), _, _ = one.score([PROMPT], [OPTIONS])
    assert alone == pytest.approx(want, abs=1e-6)


def test_questions_sharing_a_state_read_it_once(four: Engine, tiny_attn: Path) -> None:
    state = "user:sent monday, now friday. "  # with either question, one decode's worth
    prompts = [state + "late?assistant:", state + "gone?assistant:"]
    options = [["yes", "no"], ["no", "yes", "y"]]
    decodes = Decodes(four)
    got, read, evaluated = four.score(prompts, options)
    assert read == len(prompts[0]) + 1 + len(prompts[1]) + 1
    # The second prompt reads only what follows the shared state.
    second = len(prompts[1]) - len(state)
    assert decodes.sizes == [len(prompts[0]) + 1, 2 + 1, second, 1 + 2]
    assert evaluated == sum(decodes.sizes)
    want = [[forced(tiny_attn, p, o) for o in opt] for p, opt in zip(prompts, options, strict=True)]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-6)


def test_an_idle_slots_device_chain_leaves_the_logits(tiny_attn: Path) -> None:
    # A greedy request samples on the device (the CPU backend runs the chain here) and
    # its slot keeps the chain; scoring must still read raw logits from that sequence.
    with Engine([str(tiny_attn)], opts(device_sampling="on", **EXACT)) as e:
        req = CompletionRequest(
            id="g", prompt="hello", sampling=SamplingParams(temperature=0.0), num_predict=3
        )
        assert run_one(e, req).failed is None
        assert e.chains.attaches == 1
        (got,), _, _ = e.score([PROMPT], [OPTIONS])
    with Engine([str(tiny_attn)], opts(**EXACT)) as host:
        (want,), _, _ = host.score([PROMPT], [OPTIONS])
    assert got == pytest.approx(want, abs=1e-6)


def test_refusals(four: Engine) -> None:
    with pytest.raises(InvalidRequest, match="has no tokens"):
        four.score([PROMPT], [["yes", ""]])
    with pytest.raises(InvalidRequest, match=f"at most {MAX_OPTION_TOKENS}"):
        four.score([PROMPT], [["yes", "a" * (MAX_OPTION_TOKENS + 1)]])
    with pytest.raises(InvalidRequest, match="exceeds the context length"):
        four.score(["a" * 250], [["yes", "nope nope nope"]])


def test_no_free_slot_is_busy(tiny_attn: Path) -> None:
    with Engine([str(tiny_attn)], opts(n_ctx=256)) as e:
        loop = CompletionRequest(
            id="loop", prompt=LOOP_PROMPT, sampling=SamplingParams(temperature=0.0)
        )
        e.submit(loop)
        e.step()
        with pytest.raises(ServerBusy):
            e.score([PROMPT], [OPTIONS])
        e.cancel("loop")
        while e.has_work():
            e.step()
        (got,), _, _ = e.score([PROMPT], [OPTIONS])
    assert all(math.isfinite(g) and g < 0 for g in got)
