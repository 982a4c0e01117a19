"""How many concurrent users fit in a p95 latency budget, from measured rates.

The model: one request costs ``prompt ÷ prefill_rate + output ÷ decode_rate(c)``
seconds of the server's time, where ``decode_rate(c)`` is the aggregate output
rate measured with ``c`` users (batching makes it grow with ``c`` until the
hardware saturates).  With ``c`` users in a closed loop and no think time the
server is never idle, so each user waits for everyone's work (Little's law):

    latency(c) = c × (prompt ÷ prefill_rate + output ÷ decode_rate(c))

which for ``c = 1`` is exactly the single-stream time.  The p95 is that times
the measured ratio of p95 to mean latency (queues make the tail longer than the
average).  Between measured concurrencies ``decode_rate`` is interpolated
linearly; beyond the largest one it is held flat, so predictions past what was
measured are conservative.  The answer is then checked by measurement
(``check_budget``, with the levels ``cli/bench.py`` runs), because a model is only as
good as its last check.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localllm.loadtest.stats import LevelSummary, finite_json

if TYPE_CHECKING:
    from localllm.loadtest.report import BudgetAnswer, BudgetCheck

# Runs one concurrency level (so many users) and gives its figures.
Level = Callable[[int], Awaitable[LevelSummary]]


@dataclass(frozen=True)
class Rates:
    """Measured capacity: prefill tok/s, aggregate decode tok/s by concurrency, tail ratio."""

    prefill_tok_s: float
    decode_tok_s: tuple[tuple[int, float], ...]  # (concurrency, aggregate output tok/s), sorted
    tail: float = 1.0  # p95 / mean of end-to-end latency

    def decode_at(self, c: float) -> float:
        points = self.decode_tok_s
        if not points:
            raise ValueError("no decode rate measured")
        if c <= points[0][0]:
            return points[0][1]
        for (c0, r0), (c1, r1) in itertools.pairwise(points):
            if c <= c1:
                return r0 + (r1 - r0) * (c - c0) / (c1 - c0)
        return points[-1][1]


def rates_from(levels: Sequence[LevelSummary]) -> Rates:
    """Rates from measured levels: prefill from the lowest concurrency (least queueing)."""
    usable = sorted((lv for lv in levels if lv.ok), key=lambda lv: lv.concurrency)
    if not usable:
        raise ValueError("no level finished a request: nothing to estimate from")
    prefill = next((lv.prefill_tok_s for lv in usable if _pos(lv.prefill_tok_s)), math.inf)
    decode: list[tuple[int, float]] = []
    for lv in usable:
        # Output rate while decoding: the level's tokens over its wall time minus
        # the prefill work it also did (so that prefill is not counted twice).
        prefill_s = lv.prompt_tokens / prefill if math.isfinite(prefill) else 0.0
        busy = max(lv.wall_s - prefill_s, lv.wall_s * 0.05)
        if lv.output_tokens:
            decode.append((lv.concurrency, lv.output_tokens / busy))
    tails = [lv.e2e.p95 / lv.e2e.mean for lv in usable if _pos(lv.e2e.mean) and _pos(lv.e2e.p95)]
    tail = max(1.0, sorted(tails)[len(tails) // 2]) if tails else 1.0
    return Rates(prefill, tuple(decode), tail)


def _pos(x: float) -> bool:
    return math.isfinite(x) and x > 0


def predict_p95(c: int, prompt_tokens: float, output_tokens: float, rates: Rates) -> float:
    """Predicted p95 end-to-end latency (seconds) with ``c`` concurrent users."""
    prefill = prompt_tokens / rates.prefill_tok_s if _pos(rates.prefill_tok_s) else 0.0
    per_request = prefill + output_tokens / rates.decode_at(c)
    return rates.tail * c * per_request


def max_users(
    budget_s: float, prompt_tokens: float, output_tokens: float, rates: Rates, limit: int = 4096
) -> int:
    """The largest ``c`` whose predicted p95 fits ``budget_s`` (0 when not even one user does).

    The prediction is not monotonic in general (decode rate may jump between
    measured points), so scan instead of bisecting; ``limit`` bounds the scan.
    """
    best = 0
    for c in range(1, limit + 1):
        if predict_p95(c, prompt_tokens, output_tokens, rates) <= budget_s:
            best = c
        elif c > 2 * max(best, 1) and c > rates.decode_tok_s[-1][0]:
            break  # past the measured range the prediction only grows
    return best


async def check_budget(
    budget_s: float,
    levels: Sequence[LevelSummary],
    level: Level,
    *,
    prompt_tokens: int,
    output_tokens: int,
    most_users: int,
) -> tuple[BudgetAnswer, list[LevelSummary]]:
    """Predict the user count for ``budget_s`` from ``levels``, then measure (``level``) to
    confirm or correct it: the answer, and the levels measured on the way.

    ``prompt_tokens`` and ``output_tokens`` stand in for the measured means when no
    level finished a request; ``most_users`` caps the prediction."""
    rates = rates_from(levels)
    prompt = next((lv.mean_prompt_tokens for lv in levels if lv.ok), prompt_tokens)
    output = next((lv.mean_output_tokens for lv in levels if lv.ok), output_tokens)
    predicted = min(max_users(budget_s, prompt, output, rates), most_users)
    measured = {lv.concurrency: lv for lv in levels}
    extra: list[LevelSummary] = []

    async def p95_at(c: int) -> float:
        if c not in measured:
            measured[c] = await level(c)
            extra.append(measured[c])
        lv = measured[c]
        return float(lv.e2e.p95) if not (lv.errors or lv.lost) else float("inf")

    checks: list[BudgetCheck] = []
    answer = 0
    if predicted >= 1:
        # Confirm the prediction; when it misses, bisect down between the largest
        # user count already measured within budget and the prediction.
        lo = max(
            (c for c, lv in measured.items() if c < predicted and lv.e2e.p95 <= budget_s), default=0
        )
        hi = predicted
        while hi > lo:
            p95 = await p95_at(hi)
            checks.append({"users": hi, "p95_s": p95, "within": p95 <= budget_s})
            if p95 <= budget_s:
                answer = hi
                break
            hi = max(lo, (lo + hi) // 2) if hi - lo > 1 else lo
        answer = answer or lo
    pred_p95 = predict_p95(max(predicted, 1), prompt, output, rates)
    verdict = (
        "confirmed by measurement"
        if checks and checks[0]["within"]
        else f"measurement says {answer}"
    )
    summary = (
        f"budget p95 {budget_s:g}s: predicted {predicted} concurrent users "
        f"(prefill {rates.prefill_tok_s:.0f} tok/s, decode "
        + ", ".join(f"{r:.0f} tok/s at {c}" for c, r in rates.decode_tok_s)
        + f", tail x{rates.tail:.2f}; predicted p95 {pred_p95:.2f}s); {verdict}"
    )
    answer_doc: BudgetAnswer = {
        "budget_p95_s": budget_s,
        "prefill_tok_s": rates.prefill_tok_s,
        "decode_tok_s": [list(p) for p in rates.decode_tok_s],
        "tail": rates.tail,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "predicted_users": predicted,
        "predicted_p95_s": pred_p95,
        "checks": checks,
        "answer_users": answer,
        "summary": summary,
    }
    return finite_json(answer_doc), extra  # NaN rates are written as null
