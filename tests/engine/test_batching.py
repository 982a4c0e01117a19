"""Continuous batching, prefix reuse and cancellation.

The model with random attention makes every logprob depend on the whole
context, so comparing logprobs catches KV-cache mix-ups between sequences
that the greedy text alone would not show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, Done, SamplingParams
from tests.support.engine_steps import Result, collect, opts, run, run_one
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy

G = SamplingParams(temperature=0.0)
PROMPTS = ["a", "hello", "0", ".", "x", "abc", "5", LOOP_PROMPT]


def reqs() -> list[CompletionRequest]:
    return [
        CompletionRequest(f"r{i}", p, sampling=G, logprobs=2, num_predict=16)
        for i, p in enumerate(PROMPTS)
    ]


def logprobs(r: Result) -> list[float]:
    """Every logprob a result reported: sampled tokens' and the runners-up."""
    out: list[float] = []
    for p in r.pieces:
        out += [p.logprob or 0.0] + [lp for _, lp in p.top_logprobs or []]
    return out


def test_eight_concurrent_equal_one_at_a_time(tiny_attn: Path) -> None:
    with Engine([str(tiny_attn)], opts(n_parallel=1)) as e:
        alone = {q.id: run_one(e, q) for q in reqs()}
    with Engine([str(tiny_attn)], opts(n_parallel=8)) as e:
        for q in reqs():
            e.submit(q)
        together: dict[str, Result] = {}
        widest = 0
        while e.has_work():
            events = e.step()
            widest = max(widest, len({ev.id for ev in events}))
            collect(events, together)
    assert widest == 8  # all eight really shared steps
    for q in reqs():
        a, t = alone[q.id], together[q.id]
        assert t.text == a.text, q.prompt
        assert t.text == expected_greedy(str(q.prompt), 16)
        assert t.done is not None and a.done is not None
        assert t.done.context == a.done.context
        assert logprobs(t) == pytest.approx(logprobs(a), abs=2e-3)


def test_new_requests_join_and_finished_ones_leave(engine: Engine) -> None:
    engine.submit(CompletionRequest("long", LOOP_PROMPT, sampling=G, num_predict=30))
    out: dict[str, Result] = {}
    for _ in range(5):
        collect(engine.step(), out)
    engine.submit(CompletionRequest("short", "x", sampling=G))
    joined_at = None
    for i in range(40):
        events = engine.step()
        collect(events, out)
        if joined_at is None and any(ev.id == "short" for ev in events):
            joined_at = i
    assert joined_at == 0  # joined at the very next step
    assert out["short"].text == "yz" and out["long"].text == "A" * 30
    assert not engine.has_work()


def test_second_turn_reuses_the_prefix(engine: Engine) -> None:
    first = run_one(engine, CompletionRequest("t1", "hello", sampling=G, num_predict=3))
    assert first.done is not None and first.text == "pqr"
    # Turn two: the whole first exchange plus new text, as token ids.
    prompt = first.done.context + engine.tokenize(" abc", add_special=False)
    second = run_one(engine, CompletionRequest("t2", prompt, sampling=G, num_predict=2))
    d = second.done
    assert d is not None and second.text == "de"
    # Evaluated before: BOS+hello (6) + "pq" (the last sampled "r" was never decoded).
    assert d.cached_tokens == 8
    assert d.prompt_tokens == len(prompt) == 13


def test_identical_prompt_reevaluates_only_the_last_token(engine: Engine) -> None:
    run_one(engine, CompletionRequest("a", "hello", sampling=G))
    d = run_one(engine, CompletionRequest("b", "hello", sampling=G)).done
    assert d is not None and d.cached_tokens == 5 and d.prompt_tokens == 6


def test_request_goes_to_the_slot_with_the_longest_prefix(tiny: Path) -> None:
    # Idle slots keep their cells here (no parking, engine/park.py): this is the choice
    # among slots.  Parked, a 4-token prefix is not worth bringing back (MIN_SHARE).
    with Engine([str(tiny)], opts(n_parallel=2, prompt_cache=0)) as engine:
        _longest_prefix(engine)


def _longest_prefix(engine: Engine) -> None:
    run(
        engine,
        CompletionRequest("p0", "hello", sampling=G, num_predict=1),
        CompletionRequest("p1", "01", sampling=G, num_predict=1),
    )
    d = run_one(engine, CompletionRequest("q", "0123", sampling=G, num_predict=1)).done
    assert d is not None and d.cached_tokens == 3  # BOS 0 1 from the second slot
    d = run_one(engine, CompletionRequest("r", "help", sampling=G, num_predict=1)).done
    assert d is not None and d.cached_tokens == 4  # BOS h e l from the first slot


def test_reused_prefix_gives_the_same_logprobs_as_fresh(tiny_attn: Path) -> None:
    q = CompletionRequest("q", "hello world", sampling=G, logprobs=1, num_predict=6)
    with Engine([str(tiny_attn)], opts()) as e:
        fresh = run_one(e, q)
    with Engine([str(tiny_attn)], opts()) as e:
        run_one(e, CompletionRequest("warm", "hello wxyz", sampling=G, num_predict=2))
        reused = run_one(e, q)
    assert reused.done is not None and reused.done.cached_tokens == 8
    assert reused.text == fresh.text
    assert logprobs(reused) == pytest.approx(logprobs(fresh), abs=2e-3)


def test_cancel_mid_generation(engine: Engine) -> None:
    engine.submit(CompletionRequest("c", LOOP_PROMPT, sampling=G))
    out: dict[str, Result] = {}
    for _ in range(5):
        collect(engine.step(), out)
    engine.cancel("c")
    collect(engine.step(), out)
    d = out["c"].done
    assert isinstance(d, Done) and d.reason == "cancel" and d.eval_count == 5
    assert not engine.has_work()
    assert run_one(engine, CompletionRequest("n", "x", sampling=G)).text == "yz"


def test_cancel_while_queued(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_parallel=1)) as e:
        e.submit(CompletionRequest("busy", LOOP_PROMPT, sampling=G, num_predict=20))
        e.submit(CompletionRequest("waiting", "x", sampling=G))
        e.step()
        e.cancel("waiting")
        res = run(e)
    assert res["waiting"].done is not None and res["waiting"].done.reason == "cancel"
    assert res["waiting"].text == ""
