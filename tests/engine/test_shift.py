"""Context shift (engine/shift.py): a generation that fills its slot goes on, as Ollama's.

The tiny model's next token depends only on the current one, so the text after a
shift is exactly what an unlimited context would give: the check that the cells
kept after the move are the right ones is that the alphabet continues unbroken
past the limit, and the attention model's logprobs stay finite and ordered.
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run
from tests.support.tinymodel import LETTERS, LOOP_PROMPT

GREEDY_P = SamplingParams(temperature=0.0)


def req(id: str, prompt: str, **kw: object) -> CompletionRequest:
    return CompletionRequest(id=id, prompt=prompt, sampling=GREEDY_P, **kw)  # type: ignore[arg-type]


def test_generation_goes_past_the_context_and_stays_coherent(tiny: Path) -> None:
    # 16 cells per slot; "a" then 25 letters and EOS need 27.
    with Engine([str(tiny)], opts(n_ctx=16, n_parallel=2)) as e:
        got = run(
            e,
            req("shift", "a", num_predict=40),
            req("stop", "a", shift=False),
            req("loop", LOOP_PROMPT, num_predict=100),
            req("cap", LOOP_PROMPT),
        )
    shifted, stopped, loop = got["shift"], got["stop"], got["loop"]
    assert shifted.text == LETTERS[1:] and shifted.done is not None
    assert (shifted.done.reason, shifted.done.eval_count) == ("stop", 25)
    assert stopped.done is not None and stopped.done.reason == "length"
    assert stopped.text == LETTERS[1 : stopped.done.eval_count + 1]
    assert stopped.done.eval_count < 16
    assert loop.text == "A" * 100 and loop.done is not None
    assert (loop.done.reason, loop.done.eval_count) == ("length", 100)
    # Unlimited (num_predict -1): a context's worth of reply at most, so a model that
    # never ends its turn cannot hold the slot for ever.
    cap = got["cap"].done
    assert cap is not None and (cap.reason, cap.eval_count) == ("length", 16)


def test_shift_with_attention_and_the_slot_serves_again(tiny_attn: Path) -> None:
    # With attention on, the shifted cells are read back: their keys were re-rotated to
    # the new positions, so every logprob stays a sane number and the text goes on.
    with Engine([str(tiny_attn)], opts(n_ctx=16)) as e:
        long = run(e, req("long", "a", logprobs=1, num_keep=4, num_predict=40))["long"]
        again = run(e, req("again", "x", logprobs=1))["again"]
    assert long.text == LETTERS[1:] and long.done is not None
    assert (long.done.reason, long.done.eval_count) == ("stop", 25)
    assert all(p.logprob is not None and -1.0 < p.logprob <= 0 for p in long.pieces)
    assert again.text == "yz"


def test_cells_after_a_shift_are_not_reused_by_the_next_prompt(tiny_attn: Path) -> None:
    # After a shift the kept newer cells were computed beside the dropped ones.  A prompt
    # of exactly the slot's tokens (what a truncated conversation looks like: its head
    # and its tail) must not take them as its own prefix, only the kept head.
    with Engine([str(tiny_attn)], opts(n_ctx=16)) as e:
        run(e, req("first", "a", num_predict=20, num_keep=4))
        (slot,) = [s for s in e.slots if s.cache]
        tokens = list(slot.cache)
        assert len(tokens) > 8
        again = run(
            e,
            CompletionRequest(
                id="again", prompt=tokens, sampling=GREEDY_P, logprobs=1, num_predict=3
            ),
        )["again"]
    assert again.done is not None and again.done.cached_tokens <= 4
    with Engine([str(tiny_attn)], opts(n_ctx=16)) as fresh:
        cold = run(
            fresh,
            CompletionRequest(
                id="again", prompt=tokens, sampling=GREEDY_P, logprobs=1, num_predict=3
            ),
        )["again"]
    assert again.text == cold.text
    for x, y in zip(again.pieces, cold.pieces, strict=True):
        assert abs((x.logprob or 0) - (y.logprob or 0)) < 1e-5
