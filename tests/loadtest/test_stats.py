"""Percentiles, per-level summaries and the budget model, on hand-made numbers."""

from __future__ import annotations

import math

import pytest

from localllm.loadtest.budget import Rates, max_users, predict_p95, rates_from
from localllm.loadtest.report import table
from localllm.loadtest.stats import Dist, RequestResult, percentile, summarize


def test_percentile_interpolates_like_numpy() -> None:
    data = [4.0, 1.0, 3.0, 2.0]
    assert percentile(data, 0) == 1.0
    assert percentile(data, 100) == 4.0
    assert percentile(data, 50) == 2.5
    assert percentile(data, 95) == pytest.approx(3.85)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(data, 101)


def test_percentile_matches_numpy_on_random_data() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    data = list(rng.exponential(size=137))
    for q in (50, 95, 99):
        assert percentile(data, q) == pytest.approx(float(np.percentile(data, q)))


def _ok(
    ttft: float, e2e: float, tokens: int, prompt: int = 10, prefill: float | None = None
) -> RequestResult:
    gaps = [(e2e - ttft) / (tokens - 1)] * (tokens - 1) if tokens > 1 else []
    return RequestResult(
        ttft=ttft, e2e=e2e, itl=gaps, output_tokens=tokens, prompt_tokens=prompt, prefill_s=prefill
    )


def test_summary_counts_every_request_and_pools_gaps() -> None:
    results = [
        _ok(0.1, 1.1, 11),
        _ok(0.3, 2.3, 11),
        RequestResult(status="error", error="HTTP 500: boom"),
        RequestResult(status="error", error="HTTP 500: boom"),
        RequestResult(status="lost", error="stream ended"),
    ]
    s = summarize(4, results, wall_s=2.5, peak_in_flight=4)
    assert (s.requests, s.ok, s.errors, s.lost) == (5, 2, 2, 1)
    assert s.peak_in_flight == 4 and s.to_json()["peak_in_flight"] == 4
    head, row = table([s]).splitlines()[:2]
    assert head.split()[:3] == ["users", "peak", "reqs"] and row.split()[:3] == ["4", "4", "5"]
    assert s.error_samples == ("HTTP 500: boom",)  # de-duplicated
    assert s.itl.n == 20 and s.itl.p50 == pytest.approx(0.15)
    assert s.ttft.p50 == pytest.approx(0.2)
    assert s.output_tokens == 22 and s.output_tok_s == pytest.approx(22 / 2.5)
    # 20 tokens after the first ones over 3 s of decoding.
    assert s.stream_decode_tok_s == pytest.approx(20 / 3.0)
    # No server timings: prefill is prompt tokens over TTFT.
    assert s.prefill_tok_s == pytest.approx(20 / 0.4)
    assert s.to_json()["ttft"]["p50"] == pytest.approx(0.2)


def test_server_prefill_timings_win_and_nan_becomes_null() -> None:
    s = summarize(1, [_ok(0.5, 1.0, 3, prompt=100, prefill=0.25)], wall_s=1.0)
    assert s.prefill_tok_s == pytest.approx(400.0)
    empty = summarize(1, [RequestResult(status="lost")], wall_s=1.0)
    assert math.isnan(empty.ttft.p50)
    assert empty.to_json()["ttft"]["p50"] is None


def test_budget_model_is_littles_law() -> None:
    rates = Rates(prefill_tok_s=1000.0, decode_tok_s=((1, 20.0), (8, 80.0)), tail=1.0)
    # One user: 100 prompt tokens (0.1 s) + 20 output tokens at 20 tok/s (1 s).
    assert predict_p95(1, 100, 20, rates) == pytest.approx(1.1)
    # Four users: decode rate interpolated to 20 + 60*3/7; everyone waits for all four.
    d4 = 20 + 60 * 3 / 7
    assert predict_p95(4, 100, 20, rates) == pytest.approx(4 * (0.1 + 20 / d4))
    # Past the largest measured level the rate is held flat.
    assert rates.decode_at(100) == 80.0
    assert max_users(1.0, 100, 20, rates) == 0
    n = max_users(2.0, 100, 20, rates)
    assert predict_p95(n, 100, 20, rates) <= 2.0 < predict_p95(n + 1, 100, 20, rates)
    tail = Rates(1000.0, ((1, 20.0), (8, 80.0)), tail=2.0)
    assert max_users(2.0, 100, 20, tail) < n


def test_rates_from_levels() -> None:
    one = summarize(1, [_ok(0.1, 1.1, 11, prompt=100, prefill=0.1)] * 4, wall_s=4.4)
    assert one.prefill_tok_s == pytest.approx(1000.0)
    rates = rates_from([one])
    # 44 tokens in 4.4 s, less 0.4 s of prefill.
    assert rates.decode_tok_s == ((1, pytest.approx(11.0)),)
    assert rates.tail == 1.0
    with pytest.raises(ValueError):
        rates_from([summarize(1, [RequestResult(status="error")], 1.0)])


def test_dist_of_values() -> None:
    d = Dist.of([1.0, 2.0, 3.0])
    assert (d.p50, d.mean, d.n) == (2.0, 2.0, 3)
