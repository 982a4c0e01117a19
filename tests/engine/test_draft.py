"""Speculation with a draft model in the batched engine: the target's text, fewer steps.

The target is the alphabet model; drafts are tiny models of the same vocabulary
that agree with it everywhere (every draft accepted), only in part (after "h"
the draft says "x": the run from there is rejected and drafting resumes from
the target's token), or only unsurely (a flat output: ``draft_p_min`` stops
it drafting).  Each test compares the text, token counts and reasons with the
same requests run without speculation, alone and beside other slots, greedy
and sampled, and checks the KV cache afterwards by reusing it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.engine.model import Batch
from localllm.engine.ngram import MAX_DRAFT
from localllm.errors import ModelLoadError
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import Result, opts, run
from tests.support.scriptmodel import make_script_model
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy, make_tiny_model

GREEDY_P = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("drafts")
    return {
        "same": make_tiny_model(d, name="same.gguf", attention=True, seed=3),
        "partial": make_tiny_model(d, name="partial.gguf", overrides={"h": "x", "q": "b"}),
        "unsure": make_tiny_model(d, name="unsure.gguf", sharpness=1.0),
        # 40 tokens more, as padded vocabularies have, and one of them its guess after
        # "f": an id the model does not have, which must never reach its batch.
        "padded": make_tiny_model(d, name="padded.gguf", padding=40, overrides={"f": "<pad3>"}),
        # Wrong after every other letter: accepted runs of 0 or 1 token.
        "mostly wrong": make_tiny_model(
            d, name="wrong.gguf", overrides={c: "x" for c in "acegikmoqsuwy"}
        ),
    }


def req(id: str, prompt: str, draft: int = 8, **kw: object) -> CompletionRequest:
    kw.setdefault("sampling", GREEDY_P)
    return CompletionRequest(
        id=id,
        prompt=prompt,
        draft_tokens=draft,  # type: ignore[arg-type]
        draft_mode="draft",
        **kw,
    )


def both(engine: Engine, *reqs: CompletionRequest) -> tuple[dict[str, Result], dict[str, Result]]:
    spec = run(engine, *reqs)
    plain = run(
        engine,
        *[
            CompletionRequest(**{**r.__dict__, "id": r.id + "-plain", "draft_tokens": 0})
            for r in reqs
        ],
    )
    return spec, {k.removesuffix("-plain"): v for k, v in plain.items()}


def same_results(spec: dict[str, Result], plain: dict[str, Result]) -> None:
    assert spec.keys() == plain.keys()
    for rid, s in spec.items():
        p = plain[rid]
        assert s.failed is None and p.failed is None
        assert s.done is not None and p.done is not None
        assert s.text == p.text, rid
        assert (s.done.reason, s.done.eval_count) == (p.done.reason, p.done.eval_count)
        assert p.done.drafted == 0


def test_an_agreeing_draft_is_accepted_whole(tiny: Path, drafts: dict[str, Path]) -> None:
    with Engine([str(tiny)], opts(draft=str(drafts["same"]))) as e:
        assert e.info()["draft"] is True
        spec, plain = both(e, req("a", "a"), req("loop", LOOP_PROMPT, 5, num_predict=31))
    same_results(spec, plain)
    a, loop = spec["a"].done, spec["loop"].done
    assert a is not None and loop is not None
    assert spec["a"].text == expected_greedy("a")
    # b..z then EOS: the draft agrees on all of it, so nearly every token arrives drafted.
    assert a.accepted == a.drafted >= 20
    assert loop.accepted == loop.drafted >= 20 and loop.eval_count == 31


def test_a_partly_wrong_draft_changes_nothing_but_speed(
    tiny: Path, drafts: dict[str, Path]
) -> None:
    # Four streams at once, one of them not speculating.
    with Engine([str(tiny)], opts(n_parallel=4, draft=str(drafts["partial"]))) as e:
        spec, plain = both(
            e, req("a", "a"), req("m", "mno", 4), req("plain", "hello", 0), req("d", "0")
        )
        same_results(spec, plain)
        a = spec["a"].done
        assert a is not None and 0 < a.accepted < a.drafted
        # The slot holds exactly the conversation: a follow-up reuses it and answers
        # as if computed afresh.
        follow = "a" + spec["a"].text + "c"
        again = run(e, req("f", follow))["f"]
        assert again.done is not None and again.text == expected_greedy(follow)
        assert again.done.cached_tokens >= len(a.context) - 1


def test_sampled_text_is_unchanged(tiny_attn: Path, drafts: dict[str, Path]) -> None:
    hot = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, seed=11)
    with Engine([str(tiny_attn)], opts(n_parallel=2, draft=str(drafts["partial"]))) as e:
        spec, plain = both(
            e,
            req("s1", "abc", sampling=hot, num_predict=30),
            req("s2", "klm", sampling=hot, num_predict=30),
        )
    for rid in ("s1", "s2"):
        assert spec[rid].text == plain[rid].text


def test_p_min_and_n_min_hold_back_unsure_drafts(tiny: Path, drafts: dict[str, Path]) -> None:
    with Engine([str(tiny)], opts(draft=str(drafts["unsure"]))) as e:
        sure = run(e, req("p0", "a", draft_p_min=0.0))["p0"]
        held = run(e, req("p1", "a", draft_p_min=0.5))["p1"]
        few = run(e, req("n", "a", 2, draft_min=3))["n"]
    assert sure.done is not None and held.done is not None and few.done is not None
    assert sure.done.drafted > 0 and sure.text == held.text == few.text == expected_greedy("a")
    assert held.done.drafted == 0  # its top token is far below 50% sure
    assert few.done.drafted == 0  # at most 2 drafts, fewer than draft_min


def test_ngram_requests_and_num_predict_next_to_drafting(
    tiny: Path, drafts: dict[str, Path]
) -> None:
    with Engine([str(tiny)], opts(n_parallel=2, draft=str(drafts["same"]))) as e:
        spec, plain = both(
            e,
            req("n", "a", num_predict=3),
            CompletionRequest(id="g", prompt="abcdefgh.abc", sampling=GREEDY_P, draft_tokens=6),
        )
    same_results(spec, plain)
    assert spec["n"].text == "bcd"
    g = spec["g"].done
    assert g is not None and g.accepted > 0  # prompt lookup still works beside the drafter


def test_a_draft_of_another_vocabulary_fails_the_load(tiny: Path, tmp_path: Path) -> None:
    other = make_script_model(tmp_path, {"hi": "there"})
    with pytest.raises(ModelLoadError, match="vocabulary"):
        Engine([str(tiny)], opts(draft=str(other)))


def test_memory_report_counts_the_draft(tiny: Path, drafts: dict[str, Path]) -> None:
    with Engine([str(tiny)], opts()) as e:
        alone = e.memory_report()["CPU"]
    with Engine([str(tiny)], opts(draft=str(drafts["same"]))) as e:
        both_ = e.memory_report()["CPU"]
    assert both_["model"] > alone["model"] and both_["kv"] > alone["kv"]


def test_a_draft_that_keeps_missing_drafts_less(tiny: Path, drafts: dict[str, Path]) -> None:
    # 16 drafts a step would verify about 16 x 13 tokens for 25 letters; the window
    # follows the accepted runs (0 or 1) down to one or two a step instead.
    with Engine([str(tiny)], opts(draft=str(drafts["mostly wrong"]))) as e:
        spec, plain = both(e, req("a", "a", 16))
    same_results(spec, plain)
    a = spec["a"].done
    assert a is not None and 0 < a.accepted and a.drafted <= 50


def test_a_padded_draft_never_drafts_an_id_the_model_lacks(
    tiny: Path, drafts: dict[str, Path]
) -> None:
    with Engine([str(tiny)], opts(draft=str(drafts["padded"]))) as e:
        spec, plain = both(e, req("a", "a"), req("k", "k"))
    same_results(spec, plain)
    a = spec["a"].done
    assert a is not None and 0 < a.accepted <= a.drafted


def test_the_draft_model_drafts_at_most_max_draft_a_step(
    tiny: Path, drafts: dict[str, Path]
) -> None:
    # Past the daemon's check (draft_max <= 64), straight to the engine: a draft that
    # always agrees would fill the 512-row batch, one draft-model decode a row.
    steps: list[int] = []
    load = opts(draft=str(drafts["same"]), n_ctx=1024, n_batch=512, n_ubatch=512)
    with Engine([str(tiny)], load) as e:
        decode = e.ctx.decode

        def counted(batch: Batch) -> int:
            steps.append(len(batch))
            return decode(batch)

        e.ctx.decode = counted  # type: ignore[method-assign]
        spec, plain = both(e, req("loop", LOOP_PROMPT, 100_000, num_predict=400))
    same_results(spec, plain)
    done = spec["loop"].done
    assert done is not None and done.accepted == done.drafted > 300
    assert max(steps) == 1 + MAX_DRAFT
