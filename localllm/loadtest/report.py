"""Text tables, the live progress line and the JSON document of a load test."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

from localllm.loadtest.stats import Dist, LevelSummary, RequestResult, percentile


def fmt_s(seconds: float) -> str:
    """Seconds as a short human figure: ``850ms``, ``1.42s``, ``-`` for nothing measured."""
    if not math.isfinite(seconds):
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.2f}s"


def _dist(d: Dist, with_p99: bool = True) -> list[str]:
    cells = [fmt_s(d.p50), fmt_s(d.p95)]
    return [*cells, fmt_s(d.p99)] if with_p99 else cells


def table(levels: Sequence[LevelSummary]) -> str:
    """One row per concurrency level; ``peak`` is the most requests measured in flight."""
    head = [
        "users",
        "peak",
        "reqs",
        "ok",
        "err",
        "lost",
        "TTFT p50",
        "p95",
        "p99",
        "ITL p50",
        "p95",
        "p99",
        "E2E p50",
        "p95",
        "p99",
        "out tok/s",
        "req/s",
    ]
    rows = [head]
    for lv in levels:
        rows.append(
            [
                str(lv.concurrency),
                str(lv.peak_in_flight),
                str(lv.requests),
                str(lv.ok),
                str(lv.errors),
                str(lv.lost),
                *_dist(lv.ttft),
                *_dist(lv.itl),
                *_dist(lv.e2e),
                f"{lv.output_tok_s:.1f}" if math.isfinite(lv.output_tok_s) else "-",
                f"{lv.requests_per_s:.2f}" if math.isfinite(lv.requests_per_s) else "-",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    for lv in levels:
        for sample in lv.error_samples:
            lines.append(f"  error at {lv.concurrency} users: {sample}")
    return "\n".join(lines)


def progress_line(
    concurrency: int,
    results: Sequence[RequestResult],
    in_flight: int,
    elapsed: float,
    total: int | None,
) -> str:
    """``users 10 | 42/100 done, 10 running | 0 errors | 310 tok/s | TTFT p50 410ms``."""
    done = [r for r in results if r.status == "ok"]
    bad = len(results) - len(done)
    toks = sum(r.output_tokens for r in done)
    ttft = percentile([r.ttft for r in done if r.ttft is not None], 50)
    count = f"{len(results)}/{total}" if total else f"{len(results)}"
    rate = toks / elapsed if elapsed > 0 else 0.0
    return (
        f"users {concurrency} | {count} done, {in_flight} running | {bad} errors | "
        f"{rate:.0f} tok/s | TTFT p50 {fmt_s(ttft)} | {elapsed:.0f}s"
    )


class TargetInfo(TypedDict):
    """The server measured, as ``--json`` names it."""

    url: str
    api: str
    mode: str
    model: str


class WorkloadInfo(TypedDict):
    """What each level sent."""

    prompt_tokens: int
    output_tokens: int
    requests: int | None  # per level; None: by duration_s, else 4 per user
    duration_s: float | None
    concurrency: list[int]


class BudgetCheck(TypedDict):
    """One measurement made to confirm (or correct) the predicted user count."""

    users: int
    p95_s: float
    within: bool


class BudgetAnswer(TypedDict):
    """``--budget-p95``'s answer: the rates it used, the prediction, the checks made."""

    budget_p95_s: float
    prefill_tok_s: float | None  # None where not finite (JSON has no NaN)
    decode_tok_s: list[list[float]]  # [users, aggregate output tok/s] pairs
    tail: float | None
    prompt_tokens: float
    output_tokens: float
    predicted_users: int
    predicted_p95_s: float | None
    checks: list[BudgetCheck]
    answer_users: int
    summary: str


class Document(TypedDict):
    """The ``--json`` output."""

    target: TargetInfo
    workload: WorkloadInfo
    levels: list[dict[str, Any]]  # LevelSummary.to_json
    budget: BudgetAnswer | None


def document(
    target: TargetInfo,
    workload: WorkloadInfo,
    levels: Sequence[LevelSummary],
    budget: BudgetAnswer | None,
) -> Document:
    """The ``--json`` output: inputs, one object per level, the budget answer if asked."""
    return {
        "target": target,
        "workload": workload,
        "levels": [lv.to_json() for lv in levels],
        "budget": budget,
    }
