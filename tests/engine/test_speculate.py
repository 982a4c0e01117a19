"""Prompt-lookup speculation in the batched engine: the same text, fewer steps.

On the deterministic tiny model the greedy continuation of a letter is the rest
of the alphabet, so a prompt that already holds a run of the alphabet lets the
drafts (what followed the last match) agree with the model for a while: the
tests check that drafts were accepted, that the text and token counts equal a
run without speculation, greedy and sampled, alone and next to other slots, and
that the KV cache holds exactly the conversation afterwards (a later request
reuses it as a prefix).
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import Engine
from localllm.engine.model import Batch
from localllm.engine.ngram import MAX_DRAFT
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import Result, opts, run
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy

GREEDY_P = SamplingParams(temperature=0.0)
COPY_PROMPT = "abcdefghijklmnop.abcd"  # after "abcd" the prompt went on "efghijklmnop"


def req(id: str, prompt: str, draft: int, **kw: object) -> CompletionRequest:
    kw.setdefault("sampling", GREEDY_P)
    return CompletionRequest(id=id, prompt=prompt, draft_tokens=draft, **kw)  # type: ignore[arg-type]


def both(engine: Engine, *reqs: CompletionRequest) -> tuple[dict[str, Result], dict[str, Result]]:
    """The requests with speculation as given, then all with it off."""
    spec = run(engine, *reqs)
    plain = run(
        engine,
        *[
            CompletionRequest(**{**r.__dict__, "id": r.id + "-plain", "draft_tokens": 0})
            for r in reqs
        ],
    )
    return spec, {k.removesuffix("-plain"): v for k, v in plain.items()}


def test_greedy_text_is_unchanged_and_drafts_are_accepted(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_ctx=256)) as e:
        spec, plain = both(
            e, req("copy", COPY_PROMPT, 8), req("loop", LOOP_PROMPT, 4, num_predict=40)
        )
    for rid in ("copy", "loop"):
        s, p = spec[rid], plain[rid]
        assert s.text == p.text and s.done is not None and p.done is not None
        assert (s.done.reason, s.done.eval_count) == (p.done.reason, p.done.eval_count)
        assert p.done.drafted == 0
    assert spec["copy"].text == expected_greedy(COPY_PROMPT)
    copy, loop = spec["copy"].done, spec["loop"].done
    assert copy is not None and loop is not None
    assert copy.accepted >= 8  # "efghijkl..." copied from the prompt
    assert 0 < copy.accepted <= copy.drafted
    # "AAAA": every draft agrees (drafts are short at first: the history is).
    assert loop.accepted == loop.drafted > 15 and loop.eval_count == 40


def test_sampled_text_is_unchanged(tiny_attn: Path) -> None:
    # Same seed, same sampler calls in the same order: speculation must not move the RNG.
    hot = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, seed=7)
    with Engine([str(tiny_attn)], opts(n_ctx=256, n_parallel=2)) as e:
        spec, plain = both(
            e,
            req("s1", COPY_PROMPT, 6, sampling=hot, num_predict=30),
            req("s2", "zyxwvu.zyx", 6, sampling=hot, num_predict=30),
        )
    for rid in ("s1", "s2"):
        assert spec[rid].text == plain[rid].text


def test_next_to_other_slots_and_the_cache_stays_exact(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_ctx=256, n_parallel=4)) as e:
        spec, plain = both(
            e,
            req("a", COPY_PROMPT, 8),
            req("b", "hello", 0),
            req("c", LOOP_PROMPT, 8, num_predict=25),
            req("d", "0", 3),
        )
        assert {k: v.text for k, v in spec.items()} == {k: v.text for k, v in plain.items()}
        # The slot's cells are prompt + output, no rejected draft beyond (an accepted
        # draft of the last token may stay: its cell is right): a follow-up that
        # extends the conversation reuses all of it and answers as if computed afresh.
        first = spec["a"]
        assert first.done is not None
        follow_prompt = COPY_PROMPT + first.text + "a"
        follow = run(e, req("f", follow_prompt, 8))["f"]
        assert follow.done is not None and follow.text == expected_greedy(follow_prompt)
        assert follow.done.cached_tokens >= len(first.done.context) - 1


def test_num_predict_and_stop_strings_cut_inside_a_draft(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_ctx=256)) as e:
        spec, plain = both(
            e, req("n", COPY_PROMPT, 8, num_predict=3), req("s", COPY_PROMPT, 8, stop=["hij"])
        )
    assert spec["n"].text == plain["n"].text == "efg"
    assert spec["s"].text == plain["s"].text == "efg"
    assert spec["s"].done is not None and spec["s"].done.stop == "hij"


def test_logprobs_and_reused_cells_match_plain_decoding(tiny_attn: Path) -> None:
    # With attention on, every logprob depends on the whole context: drafted rows and
    # the cells a later request reuses must be exactly what plain decoding computes.
    with Engine([str(tiny_attn)], opts(n_ctx=256)) as e:
        spec, plain = both(e, req("a", COPY_PROMPT, 8, logprobs=1))
        assert spec["a"].done is not None and spec["a"].done.accepted > 0
        for x, y in zip(spec["a"].pieces, plain["a"].pieces, strict=True):
            assert x.token == y.token and abs((x.logprob or 0) - (y.logprob or 0)) < 1e-4
        again = COPY_PROMPT + spec["a"].text + "abc"
        run(e, req("warm", COPY_PROMPT, 8))  # leaves a speculated conversation in a slot
        reused = run(e, req("r", again, 0, logprobs=1))["r"]
        assert reused.done is not None and reused.done.cached_tokens > len(COPY_PROMPT)
    with Engine([str(tiny_attn)], opts(n_ctx=256)) as fresh:
        cold = run(fresh, req("r", again, 0, logprobs=1))["r"]
    for x, y in zip(reused.pieces, cold.pieces, strict=True):
        assert x.token == y.token and abs((x.logprob or 0) - (y.logprob or 0)) < 1e-4


def test_one_request_drafts_at_most_max_draft_rows_a_step(tiny: Path) -> None:
    # A CompletionRequest straight to the engine (the daemon refuses draft_max > 64):
    # an endless agreeing draft in a 512-token batch verified hundreds of rows a step.
    steps: list[int] = []
    with Engine([str(tiny)], opts(n_ctx=1024, n_batch=512, n_ubatch=512)) as e:
        decode = e.ctx.decode

        def counted(batch: Batch) -> int:
            steps.append(len(batch))
            return decode(batch)

        e.ctx.decode = counted  # type: ignore[method-assign]
        spec, plain = both(e, req("loop", LOOP_PROMPT, 100_000, num_predict=400))
    s, p = spec["loop"], plain["loop"]
    assert s.text == p.text and s.done is not None and s.done.eval_count == 400
    assert s.done.accepted == s.done.drafted > 300  # every draft agrees: only the cap cuts
    assert max(steps) == 1 + MAX_DRAFT
