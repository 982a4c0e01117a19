"""The thinking budget in the real engine (engine/thinking.py) on a script model.

The script model's greedy reply is ``<think>REASON</think>ANSWER``; the end marker is a
control token whose successor starts the answer, so a budget of N must give the first
N reasoning tokens, the end marker (forced, as text), then the same answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.engine.thinking import ThinkBudget, think_budget
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import Result, opts, run, run_one
from tests.support.scriptmodel import make_script_model

TAIL = "<|im_start|>assistant\n"
OPENED = "<|opened|>"  # a prompt that ends inside the block, as Qwen3's template renders
REASON = "Let me think about this step by step, carefully and at some length."
ANSWER = "The answer is 42."
TAGS = ["<think>", "</think>"]
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_script_model(
        tmp_path_factory.mktemp("think"),
        {TAIL: f"<think>{REASON}</think>{ANSWER}", OPENED: f"{REASON}</think>{ANSWER}"},
        control=TAGS,
        eos="<|im_end|>",
    )


@pytest.fixture(scope="module")
def engine(script: Path) -> Iterator[Engine]:
    # The gate off: "auto" drafts by the text's rule here, not by this machine's step
    # times (engine/draftcost.py has its own tests), so a busy machine changes nothing.
    with Engine([str(script)], opts(n_parallel=3, n_ctx=128, draft_gate=False)) as e:
        yield e


def ask(
    budget: int, *, prompt: str | list[int] = TAIL, message: str = "", rid: str = "r", **kw: object
) -> CompletionRequest:
    req = CompletionRequest(
        id=rid,
        prompt=prompt,
        sampling=replace(GREEDY),
        markers=TAGS,
        think_budget=budget,
        think_open="<think>",
        think_end="</think>",
        think_close="</think>",
        think_message=message,
        think_opened=prompt == OPENED,
    )
    for k, v in kw.items():
        setattr(req, k, v)
    return req


def reasoning_tokens(e: Engine, prompt: str = TAIL) -> list[str]:
    """The reasoning's token texts, as the unbudgeted reply has them."""
    r = run_one(e, ask(-1, prompt=prompt))
    texts = [e.model.piece(p.token, special=True).decode() for p in r.pieces]
    texts = texts[1:] if texts[0] == "<think>" else texts
    if "</think>" not in texts:  # text where the other script had the control token first
        return texts[: len(texts) // 2]
    return texts[: texts.index("</think>")]


def test_no_budget_is_the_reply_as_today(engine: Engine) -> None:
    plain = run_one(engine, CompletionRequest(id="p", prompt=TAIL, sampling=GREEDY, markers=TAGS))
    budgeted = run_one(engine, ask(-1))
    assert plain.text == budgeted.text == f"<think>{REASON}</think>{ANSWER}"
    assert [p.token for p in plain.pieces] == [p.token for p in budgeted.pieces]
    # A budget larger than the reasoning changes nothing either.
    assert run_one(engine, ask(10_000)).text == plain.text


@pytest.mark.parametrize("n", [1, 3, 7])
def test_budget_closes_the_block_then_the_model_answers(engine: Engine, n: int) -> None:
    head = "".join(reasoning_tokens(engine)[:n])
    r = run_one(engine, ask(n))
    assert r.text == f"<think>{head}</think>{ANSWER}"
    assert r.done is not None and r.done.reason == "stop"
    # The forced marker is a piece of its own, so a streaming parser sees the block close.
    assert "</think>" in [p.text for p in r.pieces]
    # Forced tokens are part of the reply: counted, and in the returned context.
    answer = run_one(engine, ask(-1)).done
    assert answer is not None and r.done.eval_count == answer.eval_count - (
        len(reasoning_tokens(engine)) - n
    )
    assert r.done.context[-r.done.eval_count :][:1] == answer.context[-answer.eval_count :][:1]


def test_budget_zero_means_no_thinking(engine: Engine) -> None:
    assert run_one(engine, ask(0)).text == f"<think></think>{ANSWER}"
    # The prompt opened the block: closed before the model writes a token of it.
    r = run_one(engine, ask(0, prompt=OPENED))
    assert r.text == f"</think>{ANSWER}"
    assert r.pieces[0].text == "</think>"


def test_opened_block_counts_from_the_first_token(engine: Engine) -> None:
    head = "".join(reasoning_tokens(engine, OPENED)[:2])
    assert run_one(engine, ask(2, prompt=OPENED)).text == f"{head}</think>{ANSWER}"


def test_message_is_written_before_the_end_marker_as_plain_text(engine: Engine) -> None:
    head = "".join(reasoning_tokens(engine)[:3])
    # (No spaces: this vocabulary has no "▁", so SPM would spell them as its bytes.)
    r = run_one(engine, ask(3, message="Time-is-up.<think>"))
    # "<think>" in the message is the client's text, not the control token.
    assert r.text == f"<think>{head}Time-is-up.<think></think>{ANSWER}"
    control = engine.tokenize("<think>", add_special=False)
    b = think_budget(engine.model, ask(3, message="Time-is-up.<think>"))
    assert b is not None and not set(control) & set(b.close[:-1])


def test_no_room_means_no_forced_close(engine: Engine) -> None:
    # num_predict leaves no room for the marker and an answer: the reply ends as it
    # would have, with "length", rather than with a half-written close.
    r = run_one(engine, ask(2, num_predict=4))
    assert r.done is not None and r.done.reason == "length" and "</think>" not in r.text
    assert r.done.eval_count == 4
    # Enough room for the marker and one token: closed, then cut by num_predict.
    r = run_one(engine, ask(2, num_predict=5))
    assert r.text.endswith("</think>" + ANSWER[: len(r.text) - r.text.index("</think>") - 8])
    assert r.done is not None and r.done.reason == "length" and r.done.eval_count == 5


def test_a_stop_string_in_the_forced_text_stops(engine: Engine) -> None:
    r = run_one(engine, ask(2, message="STOP-here", stop=["STOP"]))
    assert r.done is not None and r.done.reason == "stop" and r.done.stop == "STOP"
    assert not r.text.endswith("STOP") and "</think>" not in r.text


def test_a_grammar_rules_alone(engine: Engine) -> None:
    req = ask(0)
    req.sampling.grammar = 'root ::= "x"'
    assert think_budget(engine.model, req) is None


def test_parallel_requests_keep_their_own_budgets(engine: Engine) -> None:
    alone = {n: run_one(engine, ask(n)).text for n in (-1, 0, 4)}
    together = run(engine, *(ask(n, rid=str(n)) for n in (-1, 0, 4)))
    assert {n: together[str(n)].text for n in (-1, 0, 4)} == alone


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_speculation_does_not_cross_the_forced_close(engine: Engine, mode: str) -> None:
    # A prompt that holds the reasoning's tokens: prompt lookup drafts the rest of it,
    # right across the point where the budget closes the block.
    plain = run_one(engine, ask(-1))
    reply = [p.token for p in plain.pieces]
    prompt = reply + engine.tokenize(TAIL, add_special=False)
    without: Result = run_one(engine, ask(5, prompt=prompt))
    with_spec = run_one(engine, ask(5, prompt=prompt, draft_tokens=16, draft_mode=mode))
    assert with_spec.text == without.text
    assert with_spec.done is not None and with_spec.done.drafted > 0
    assert with_spec.text.startswith("<think>") and "</think>" + ANSWER in with_spec.text


def test_device_sampling_chain_is_forced_too(script: Path) -> None:
    with Engine([str(script)], opts(device_sampling="on")) as e:
        head = "".join(reasoning_tokens(e)[:3])
        assert run_one(e, ask(3)).text == f"<think>{head}</think>{ANSWER}"


def test_the_forced_close_waits_for_room_in_a_full_batch(script: Path) -> None:
    # n_batch equal to the slots: decoding rows fill the step, the close goes in the next.
    with Engine([str(script)], opts(n_parallel=2, n_batch=2, n_ubatch=2)) as e:
        want = {n: run_one(e, ask(n)).text for n in (3, -1)}
        got = run(e, ask(3, rid="3"), ask(-1, rid="-1"))
        assert {n: got[str(n)].text for n in (3, -1)} == want


# -- the counter alone ----------------------------------------------------------------


def test_counter_waits_for_a_whole_utf8_character() -> None:
    b = ThinkBudget(1, b"<t>", b"</t>", [9], opened=True)
    assert not b.feed("é".encode()[:1])  # the budget is spent mid-character
    assert b.feed("é".encode()[1:])


def test_counter_sees_markers_across_tokens_and_reopened_blocks() -> None:
    b = ThinkBudget(2, b"<think>", b"</think>", [9], opened=False)
    assert not b.feed(b"<th") and not b.feed(b"ink>")  # opened across two tokens
    assert not b.feed(b"a")
    assert not b.feed(b"</thi") and not b.feed(b"nk>")  # the end, also split
    assert not b.feed(b"answer")
    assert b.feed(b"<think>")  # the budget is the reply's: nothing left for a new block
    b.closed()
    assert not b.feed(b"more")
