"""Decode-first steps (LoadOptions.step_tokens / step_ms, LOCALLLM_STEP_BUDGET).

While a slot generates, a new prompt's prefill may only fill the step up to the
budget (a token count, or what fits in a step time by the measured costs), so
the generating slot gets a token every step and each step stays small; with no
budget the prompt takes the whole batch at once.
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.budget import MIN_PROMPT_TOKENS, StepCost
from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, Piece, SamplingParams
from tests.support.engine_steps import opts
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy

G = SamplingParams(temperature=0.0)
LONG = "." * 200 + "x"


def run_beside_a_decode(
    budget: int, tiny: Path, ms: float = 0.0
) -> tuple[list[int], list[bool], dict[str, str]]:
    """Per step until the long prompt's first token: the batch size, and whether the
    generating slot got its token; then both requests' whole texts."""
    with Engine(
        [str(tiny)],
        opts(n_ctx=512, n_parallel=2, n_batch=256, n_ubatch=256, step_tokens=budget, step_ms=ms),
    ) as e:
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


def test_a_step_time_budget_learns_what_prompt_tokens_cost(tiny: Path) -> None:
    # 1 microsecond: nothing but decoding fits, so once the first mixed step has shown
    # what a prompt token costs, prompts advance by the floor of 16 tokens a step.
    sizes, fed, texts = run_beside_a_decode(0, tiny, ms=0.001)
    assert texts == {"loop": "A" * 40, "long": expected_greedy(LONG)}
    assert sizes[0] > 100  # before any measurement: one micro-batch (n_ubatch 256)
    assert max(sizes[1:]) <= MIN_PROMPT_TOKENS + 1 and all(fed)
    # An hour: everything fits, the prompt rides in one step as without a budget.
    roomy, _, _ = run_beside_a_decode(0, tiny, ms=3_600_000.0)
    assert max(roomy) > 200


def test_step_cost_estimates() -> None:
    cost = StepCost(first_guess=512)
    assert cost.allowance(50e6) == 512  # nothing measured yet
    cost.observe(10_000_000, decoding=4, prompt=0)  # a decode-only step: 10 ms
    cost.observe(110_000_000, decoding=4, prompt=100)  # +100 prompt tokens: 1 ms each
    assert cost.allowance(50e6) == 40  # 50 ms - 10 ms of decoding = 40 tokens
    assert cost.allowance(5e6) == MIN_PROMPT_TOKENS  # decoding alone is over the target
    cost.observe(2_000_000, decoding=4, prompt=8)  # too few prompt tokens to learn from
    assert cost.allowance(50e6) == 40
