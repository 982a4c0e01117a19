"""Decode-first steps (LoadOptions.step_tokens, LOCALLLM_STEP_TOKENS).

While a slot generates, a new prompt's prefill may only fill the step up to the
budget, so the generating slot gets a token every step and each step stays
small; with no budget the prompt takes the whole batch at once.
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, Piece, SamplingParams
from tests.engine.conftest import opts
from tests.tinymodel import LOOP_PROMPT, expected_greedy

G = SamplingParams(temperature=0.0)
LONG = "." * 200 + "x"


def run_beside_a_decode(budget: int, tiny: Path) -> tuple[list[int], list[bool], dict[str, str]]:
    """Per step until the long prompt's first token: the batch size, and whether the
    generating slot got its token; then both requests' whole texts."""
    with Engine([str(tiny)], opts(n_ctx=512, n_parallel=2, n_batch=256, n_ubatch=256,
                                  step_tokens=budget)) as e:
        e.submit(CompletionRequest("loop", LOOP_PROMPT, sampling=G, num_predict=40))
        e.step()  # the loop is generating
        e.submit(CompletionRequest("long", LONG, sampling=G))
        sizes: list[int] = []
        fed: list[bool] = []
        texts = {"loop": "A", "long": ""}  # the loop's first token came in the first step
        while e.has_work():
            events = e.step()
            pieces = [ev for ev in events if isinstance(ev, Piece)]
            for ev in pieces:
                texts[ev.id] += ev.text
            if not texts["long"] or any(p.id == "long" for p in pieces):
                sizes.append(len(e.batch))
                fed.append(any(p.id == "loop" for p in pieces))
        return sizes, fed, texts


def test_a_budget_spreads_the_prompt_and_keeps_every_step_small(tiny: Path) -> None:
    whole, _, whole_texts = run_beside_a_decode(0, tiny)
    sizes, fed, texts = run_beside_a_decode(32, tiny)
    assert texts == whole_texts == {"loop": "A" * 40, "long": expected_greedy(LONG)}
    assert max(whole) > 200  # without a budget the prompt rides in one big step
    assert max(sizes) <= 32 and len(sizes) >= 200 // 32  # with one: budget-sized pieces
    assert all(fed)  # and the generating slot got a token at every one of those steps
