"""Context limits: prompt truncation, overflow errors, a full slot, chunked prefill."""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import OVERFLOW, Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run, run_one
from tests.support.tinymodel import GREEDY, LOOP_PROMPT

G = SamplingParams(temperature=0.0)


def test_slot_context_is_what_info_reports(engine: Engine) -> None:
    info = engine.info()
    assert info["n_ctx"] == 256 and info["n_parallel"] == 2
    assert info["n_ctx_train"] == 2048 and info["n_vocab"] > 300
    assert (info["bos"], info["eos"]) == ("<s>", "</s>")
    assert "messages" in info["chat_template"]


def test_long_prompt_is_truncated_keeping_head_and_tail(engine: Engine) -> None:
    n_ctx = engine.info()["n_ctx"]
    prompt = "b" * 400 + "x"
    r = run_one(engine, CompletionRequest("r", prompt, sampling=G, num_keep=4))
    assert r.text == "yz"  # the tail survived
    assert r.done is not None
    assert r.done.prompt_tokens == 4 + (n_ctx - 4) // 2
    assert r.done.context[:4] == engine.tokenize("bbb")  # BOS + head kept


def test_long_prompt_without_truncate_fails_400(engine: Engine) -> None:
    r = run_one(engine, CompletionRequest("r", "b" * 400, sampling=G, truncate=False))
    assert r.failed is not None
    # The counts too: BOS and 400 letters against a 256-token slot that keeps one for
    # the reply (the Anthropic route turns them into its "prompt is too long" words).
    assert (r.failed.status, r.failed.message) == (400, f"{OVERFLOW} (401 tokens > 255 maximum)")
    assert run_one(engine, CompletionRequest("s", "x", sampling=G)).text == "yz"


def test_generation_that_fills_the_slot_ends_with_length(engine: Engine) -> None:
    n_ctx = engine.info()["n_ctx"]
    r = run_one(engine, CompletionRequest("r", LOOP_PROMPT, sampling=G, shift=False))
    assert r.done is not None and r.done.reason == "length"
    # Without context shift, the prompt (2 tokens) and all but the last generated
    # token fill the slot (engine/test_shift.py covers the shifting default).
    assert r.done.eval_count == n_ctx - 2 + 1
    assert r.text == "A" * r.done.eval_count


def test_chunked_prefill_beside_decoding(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_parallel=2, n_batch=16, n_ubatch=16)) as e:
        long_prompt = "." * 100 + "x"
        loop = CompletionRequest("loop", LOOP_PROMPT, sampling=G, num_predict=40)
        longr = CompletionRequest("long", long_prompt, sampling=G)
        e.submit(loop)
        e.step()  # the loop is decoding before the long prompt arrives
        res = run(e, longr)
        assert res["long"].text == "yz"
        assert res["loop"].text == "A" * 39  # its first token came from the first step
        done = res["long"].done
        assert done is not None and done.prompt_tokens == 102 and done.cached_tokens == 0


def test_small_batch_still_exact(tiny: Path) -> None:
    with Engine([str(tiny)], opts(n_batch=4, n_ubatch=4)) as e:
        assert run_one(e, CompletionRequest("r", "hello", sampling=G)).text == GREEDY["hello"]
