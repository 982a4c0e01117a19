"""Speculation's default, ``"auto"`` prompt lookup (engine/speculate.py): it changes no output.

Every request here runs three ways from the same cache state: without
speculation, under ``"auto"`` and under ``"ngram"``; text, tokens and counts
must agree, and with attention on, the first token's logprobs bit for bit (the
prompt is evaluated exactly as without speculation; drafting starts after it).
The auto rule's decisions show in the Done's draft counts: it drafts where the
request's text offers matches, stops after ``AUTO_MISSES`` fruitless steps, and
never drafts for a sampled request.  The batch's own say (engine/draftcost.py, from
step times, which vary from run to run) is off here, so the counts are the rule's;
tests/engine/test_draftcost.py covers that part.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.engine.slots import cut
from localllm.engine.speculate import AUTO_MISSES, AUTO_START
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import Result, opts, run, run_one
from tests.support.scriptmodel import make_script_model
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy

GREEDY = SamplingParams(temperature=0.0)
MODES = ("off", "auto", "ngram")
COPY = "abcdefghijklmnop.abcd"  # after "abcd" the prompt went on "efghijklmnop": drafts agree
# Every pair the alphabet walk will pass ("bc", "cd", ...) was followed by "." in the
# prompt, so each step that drafts drafts wrong: lookup that never pays.
MISSES = "bc.cd.de.ef.fg.gh.hi.ij.jk.kl.a"
PROMPTS = [COPY, LOOP_PROMPT, MISSES, "hello", "0", "abcdefghij.abc.abc"]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def req(mode: str, prompt: str, **kw: object) -> CompletionRequest:
    kw.setdefault("sampling", GREEDY)
    kw.setdefault("num_predict", 40)
    return CompletionRequest(
        id=mode,
        prompt=prompt,
        draft_tokens=0 if mode == "off" else 16,
        draft_mode="ngram" if mode == "off" else mode,  # type: ignore[arg-type]
        **kw,
    )  # type: ignore[arg-type]


def fresh(e: Engine) -> None:
    for s in e.slots:
        cut(e.ctx, s, 0)


def each_mode(e: Engine, prompt: str, **kw: object) -> dict[str, Result]:
    """The request under each mode, each from an empty cache."""
    out = {}
    for mode in MODES:
        fresh(e)
        out[mode] = run_one(e, req(mode, prompt, **kw))
    return out


def same_output(runs: dict[str, Result]) -> None:
    off = runs["off"]
    assert off.done is not None and off.done.drafted == 0
    for mode in ("auto", "ngram"):
        r = runs[mode]
        assert r.done is not None and r.text == off.text, mode
        assert [p.token for p in r.pieces] == [p.token for p in off.pieces], mode
        assert (r.done.reason, r.done.eval_count) == (off.done.reason, off.done.eval_count)


@pytest.mark.parametrize("model", ["tiny", "tiny_attn"])
def test_the_default_changes_no_greedy_output(model: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(model)
    with Engine([str(path)], opts(n_ctx=256, draft_gate=False)) as e:
        for prompt in PROMPTS:
            runs = each_mode(e, prompt, logprobs=2)
            same_output(runs)
            assert runs["off"].text == expected_greedy(prompt, 40)
            first = {m: r.pieces[0] for m, r in runs.items()}
            # The first token comes from the prompt's own logits: the same bits.
            assert (
                len({(p.token, p.logprob, tuple(p.top_logprobs or ())) for p in first.values()})
                == 1
            ), prompt
            for mode in ("auto", "ngram"):
                for x, y in zip(runs[mode].pieces, runs["off"].pieces, strict=True):
                    assert abs((x.logprob or 0) - (y.logprob or 0)) < 1e-4


def test_the_default_changes_no_script_model_output(tmp_path: Path) -> None:
    # A reply that quotes the prompt, in pieces a real tokenizer would make.
    script = make_script_model(tmp_path, {"<|go|>": CALL})
    with Engine([str(script)], opts(n_ctx=256, draft_gate=False)) as e:
        runs = each_mode(e, "Say exactly this: " + CALL + "\n<|go|>", num_predict=-1)
        same_output(runs)
        assert runs["off"].text == CALL
        auto = runs["auto"].done
        assert auto is not None and 0 < auto.accepted <= auto.drafted


def prompt_beside(path: Path, a_mode: str, prompt: str) -> tuple[list[int], Result]:
    """``prompt`` arriving while slot A generates (under ``a_mode``): its chunks, its result."""
    chunks: list[int] = []
    with Engine(
        [str(path)], opts(n_ctx=256, n_parallel=2, n_batch=16, n_ubatch=16, draft_gate=False)
    ) as e:
        add_seq = e.batch.add_seq

        def spy(tokens: Sequence[int], pos0: int, seq: int, logits_last: bool) -> int:
            a = e.slots[seq].active
            if a is not None and a.req.id == "b":
                chunks.append(len(tokens))
            return add_seq(tokens, pos0, seq, logits_last)

        e.batch.add_seq = spy  # type: ignore[method-assign]
        e.submit(req(a_mode, LOOP_PROMPT * 8, num_predict=80))  # "AAA...": drafts agree
        for _ in range(3):  # A's prompt, then A decoding (and drafting)
            e.step()
        b = CompletionRequest(id="b", prompt=prompt, sampling=GREEDY, num_predict=5, logprobs=2)
        return chunks, run(e, b)["b"]


def test_the_prompt_is_cut_the_same_while_another_slot_speculates(tiny_attn: Path) -> None:
    # A small batch: slot A drafts while B's prompt arrives.  Drafts take what the prompt
    # chunks leave, so B's chunks (and so its first token's logits) are those of a run
    # where A does not speculate.
    prompt = "zyxwvutsrqponmlkjihgfedcba" * 2
    c_off, r_off = prompt_beside(tiny_attn, "off", prompt)
    c_on, r_on = prompt_beside(tiny_attn, "ngram", prompt)
    assert c_on == c_off and len(c_off) > 2 and sum(c_off) == len(prompt) + 1
    assert [(p.token, p.logprob) for p in r_on.pieces] == [
        (p.token, p.logprob) for p in r_off.pieces
    ]


def test_auto_drafts_where_the_text_offers_matches(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_ctx=256, draft_gate=False)) as e:
        copy = each_mode(e, COPY)
        plain = each_mode(e, "hello")
    auto = copy["auto"].done
    assert auto is not None and 0 < auto.accepted <= auto.drafted
    # The first draft is short (a window of 2 * AUTO_START + 1), then grows as it is
    # accepted; every drafted token here is right but those past the text's end.
    assert auto.accepted >= 8
    for r in plain.values():  # "hellopqrs...": no pair recurs, so nothing is drafted
        assert r.done is not None and r.done.drafted == 0


def test_auto_gives_up_after_a_run_of_rejected_drafts(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_ctx=256, draft_gate=False)) as e:
        runs = each_mode(e, MISSES)
    same_output(runs)
    auto, ngram = runs["auto"].done, runs["ngram"].done
    assert auto is not None and ngram is not None
    assert auto.accepted == ngram.accepted == 0
    # AUTO_MISSES drafting steps: the first of the start window, the rest of one token
    # (the window follows the accepted run, here 0), then no more.
    assert auto.drafted == int(2 * AUTO_START + 1) + AUTO_MISSES - 1
    # Explicit "ngram" keeps drafting at every pair the prompt has ("bc" .. "kl").
    assert ngram.drafted > auto.drafted + 4


def test_auto_never_drafts_for_a_sampled_request(tiny_attn: Path) -> None:
    hot = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=11)
    with Engine([str(tiny_attn)], opts(n_ctx=256, draft_gate=False)) as e:
        runs = each_mode(e, COPY, sampling=hot, num_predict=30)
    same_output(runs)  # same seed, same draws: a sampled request's text is unchanged too
    auto, ngram = runs["auto"].done, runs["ngram"].done
    assert auto is not None and ngram is not None
    assert auto.drafted == 0 and ngram.drafted > 0
