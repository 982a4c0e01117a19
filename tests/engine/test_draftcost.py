"""The default speculation asks the batch (engine/draftcost.py): no drafts where they cost
the other streams more than they save, long drafts on one copy-heavy stream, and no verify
step stretched past 1.5 times a plain one while other streams wait on it.

The line through (rows, step time) is learned from the engine's own steps; these tests
give it the steps of two kinds of device: one that computes for every row (a CPU at a
wide batch: a row costs as much as the fixed part of a step) and one whose step is
mostly its fixed cost (one stream reading the weights once: rows are nearly free).
Through the real engine, the cost is frozen at such a line, so the decisions do not
depend on this machine's timing, and the output is compared with speculation off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine import engine as engine_module
from localllm.engine.draftcost import (
    MAX_STRETCH,
    PRIOR_ROW_SHARE,
    DraftCost,
    acceptance,
    worth,
)
from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run

GREEDY = SamplingParams(temperature=0.0)
COPY = "abcdefghijklmnop.abcdefghijklmnop.abcd"  # lookup's drafts agree from the start
MS = 1_000_000


def learned(fixed_ms: float, row_ms: float, rows: range = range(1, 33)) -> DraftCost:
    cost = DraftCost()
    for _ in range(3):
        for n in rows:
            cost.observe(n, int((fixed_ms + row_ms * n) * MS))
    return cost


def test_the_line_is_learned_from_the_steps() -> None:
    fixed, per_row = learned(4.0, 0.5).line() or (0.0, 0.0)
    assert fixed == pytest.approx(4 * MS, rel=1e-6) and per_row == pytest.approx(0.5 * MS)
    # Before the rows have varied, a row is taken to cost a share of a one-row step.
    one = DraftCost()
    for _ in range(5):
        one.observe(1, 10 * MS)
    assert one.line() == pytest.approx((10 * MS * (1 - PRIOR_ROW_SHARE), PRIOR_ROW_SHARE * 10 * MS))
    assert DraftCost().line() is None


def test_a_wide_batch_on_a_compute_bound_device_drafts_nothing() -> None:
    cost = learned(1.0, 1.0)  # a row costs what the step's fixed part does
    plan = cost.plan(rows=8, streams=8)
    assert plan.price == pytest.approx(8 / 9)
    # Even a slot that accepts 80% of its drafts (a long copy) is not worth a row.
    assert worth(0.8, plan.price, 16) == 0
    # The same device with one stream: a row costs half a step, so three tokens pay; no
    # other stream waits on the verify step, so the stretch bound does not apply.
    one = cost.plan(rows=1, streams=1)
    assert (one.price, worth(0.8, one.price, 16), one.room) == (pytest.approx(0.5), 3, 1 << 30)
    # Two streams: the step may stretch to 1.5 times (2 + 1 + 1 ms: one row).
    two = cost.plan(rows=2, streams=2)
    assert two.room == int((MAX_STRETCH - 1) * 3 / 1) == 1


def test_acceptance_is_counted_per_drafted_token() -> None:
    assert acceptance(0, 0) == 0.5  # nothing verified yet: a coin flip
    # A slot whose short drafts were all accepted (its runs were cut by the room, not by
    # the model) is not held to them: 20 accepted, 1 rejected.
    assert acceptance(20, 1) == pytest.approx(21 / 23)
    assert acceptance(0, 4) == pytest.approx(1 / 6)


def test_one_copy_heavy_stream_drafts_long_and_a_busy_batch_within_the_stretch() -> None:
    cost = learned(20.0, 0.5)  # mostly fixed: reading the weights once
    plan = cost.plan(rows=1, streams=1)
    assert plan.price == pytest.approx(0.5 / 20.5)
    assert worth(acceptance(8, 1), plan.price, 16) == 16
    # An unknown slot under "auto" starts at a coin flip per token: 5 tokens.
    assert worth(acceptance(0, 0), plan.price, 16) == 5
    # Beside other streams, all drafts together stretch the step to at most 1.5 times.
    busy = cost.plan(rows=4, streams=4)
    assert busy.room == int((MAX_STRETCH - 1) * 22 / 0.5) == 22


class Frozen(DraftCost):
    """A device's line, kept whatever this machine's steps measure."""

    def __init__(self, fixed_ms: float, row_ms: float) -> None:
        super().__init__()
        for n in range(1, 33):
            super().observe(n, int((fixed_ms + row_ms * n) * MS))

    def observe(self, rows: int, dt_ns: int) -> None:
        pass


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The rows of every batch the engine decodes."""
    seen: list[int] = []
    real = engine_module.fill_batch

    def recording(batch, *args, **kw):  # type: ignore[no-untyped-def]
        part = real(batch, *args, **kw)
        if part:
            seen.append(len(batch))
        return part

    monkeypatch.setattr(engine_module, "fill_batch", recording)
    yield seen


def auto(rid: str, prompt: str = COPY) -> CompletionRequest:
    return CompletionRequest(
        id=rid, prompt=prompt, sampling=GREEDY, num_predict=40, draft_tokens=16, draft_mode="auto"
    )


def off(r: CompletionRequest) -> CompletionRequest:
    return CompletionRequest(**{**r.__dict__, "id": r.id + "-off", "draft_tokens": 0})


@pytest.mark.parametrize(
    "device, streams, drafts",
    [("compute-bound", 4, False), ("fixed-cost", 1, True), ("fixed-cost", 4, True)],
)
def test_the_engine_drafts_only_where_the_batch_pays(
    tiny: Path, steps: list[int], device: str, streams: int, drafts: bool
) -> None:
    line = (1.0, 1.0) if device == "compute-bound" else (20.0, 0.5)
    with Engine([str(tiny)], opts(n_ctx=256, n_parallel=4)) as e:
        reqs = [auto(f"r{i}") for i in range(streams)]
        plain = run(e, *[off(r) for r in reqs])
        e.draft_cost = Frozen(*line)
        steps.clear()
        spec = run(e, *reqs)
    for r in reqs:
        got, want = spec[r.id], plain[r.id + "-off"]
        assert got.done is not None and want.done is not None
        assert got.text == want.text and got.done.eval_count == want.done.eval_count
        assert (got.done.drafted > 0) is drafts, (r.id, got.done)
        assert (got.done.accepted > 0) is drafts  # a copy: drafts agree
    if device == "fixed-cost" and streams > 1:
        # No step past 1.5 times a plain one: at most 22 draft rows beside the streams'.
        assert max(steps) <= streams + int(0.5 * (20 + 0.5 * streams) / 0.5)
