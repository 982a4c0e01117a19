"""What one request measured, and the statistics of a concurrency level.

Times are seconds on the client's monotonic clock.  TTFT is from sending the
request to the first chunk carrying text; inter-token latency (ITL) is every
gap between consecutive text chunks of a request, pooled over the level's
requests (a slow stream contributes many gaps, as it does to what users feel);
end-to-end latency runs to the final chunk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PERCENTILES = (50, 95, 99)


@dataclass
class RequestResult:
    """One request.  ``status`` is ``ok``, ``error`` (an answer said so) or ``lost``.

    ``lost`` means the stream ended without its final chunk (connection dropped,
    server closed early): counted apart from errors because a server that drops
    streams silently is worse than one that refuses them.
    """

    status: str = "ok"
    error: str = ""
    start: float = 0.0
    ttft: float | None = None
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int = 0
    chunks: int = 0
    # Server-reported prompt processing time (Ollama's prompt_eval_duration);
    # None for APIs that do not report it.
    prefill_s: float | None = None
    decode_s: float | None = None
    text: str = ""


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), interpolating linearly between order statistics.

    Same definition as numpy's default ("linear"), so figures agree with other
    tools; an empty sequence gives NaN rather than an exception because a level
    where every request failed still has a row to print.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile out of range: {q}")
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass(frozen=True)
class Dist:
    """p50/p95/p99 and mean of one latency, in seconds (NaN when nothing was measured)."""

    p50: float
    p95: float
    p99: float
    mean: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist:
        mean = sum(values) / len(values) if values else math.nan
        p50, p95, p99 = (percentile(values, q) for q in PERCENTILES)
        return cls(p50, p95, p99, mean, len(values))


@dataclass(frozen=True)
class LevelSummary:
    """Everything reported for one concurrency level."""

    concurrency: int
    # The most requests that were really in flight at once during the level,
    # counted by the load generator (0 when not measured).
    peak_in_flight: int
    requests: int
    ok: int
    errors: int
    lost: int
    wall_s: float
    ttft: Dist
    itl: Dist
    e2e: Dist
    output_tokens: int
    prompt_tokens: int
    output_tok_s: float
    requests_per_s: float
    # Prompt tokens per second of prefill, from server timings where reported,
    # else prompt tokens over TTFT (which also holds one decode step).
    prefill_tok_s: float
    # Output tokens per second of one stream while decoding (after its first token).
    stream_decode_tok_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    error_samples: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["error_samples"] = list(self.error_samples)
        return {k: finite_json(v) for k, v in out.items()}


def finite_json(value: Any) -> Any:
    """NaN is not JSON: write it as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return value


def _rate(tokens: float, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else math.nan


def summarize(
    concurrency: int, results: Sequence[RequestResult], wall_s: float, *, peak_in_flight: int = 0
) -> LevelSummary:
    """Aggregate one level's requests; ``wall_s`` is first send to last answer.

    ``peak_in_flight`` is what the load generator counted (``users.run_level``).
    """
    done = [r for r in results if r.status == "ok"]
    ttft = [r.ttft for r in done if r.ttft is not None]
    itl = [gap for r in done for gap in r.itl]
    e2e = [r.e2e for r in done if r.e2e is not None]
    out_tokens = sum(r.output_tokens for r in done)
    counted = [r for r in done if r.prompt_tokens is not None]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in counted)
    # Prefill rate: prefer the server's own clock (no queueing, no network).
    timed = [r for r in counted if r.prefill_s]
    if timed:
        prefill = _rate(
            sum(r.prompt_tokens or 0 for r in timed), sum(r.prefill_s or 0 for r in timed)
        )
    else:
        prefill = _rate(prompt_tokens, sum(r.ttft or 0 for r in counted if r.ttft is not None))
    decode_pairs = [
        (r.output_tokens - 1, r.e2e - r.ttft)
        for r in done
        if r.ttft is not None and r.e2e is not None and r.output_tokens > 1
    ]
    decode = _rate(sum(t for t, _ in decode_pairs), sum(s for _, s in decode_pairs))
    errors = [r for r in results if r.status == "error"]
    samples = tuple(dict.fromkeys(r.error for r in errors))[:5]
    return LevelSummary(
        concurrency=concurrency,
        peak_in_flight=peak_in_flight,
        requests=len(results),
        ok=len(done),
        errors=len(errors),
        lost=sum(1 for r in results if r.status == "lost"),
        wall_s=wall_s,
        ttft=Dist.of(ttft),
        itl=Dist.of(itl),
        e2e=Dist.of(e2e),
        output_tokens=out_tokens,
        prompt_tokens=prompt_tokens,
        output_tok_s=_rate(out_tokens, wall_s),
        requests_per_s=_rate(len(done), wall_s),
        prefill_tok_s=prefill,
        stream_decode_tok_s=decode,
        mean_prompt_tokens=prompt_tokens / len(counted) if counted else math.nan,
        mean_output_tokens=out_tokens / len(done) if done else math.nan,
        error_samples=samples,
    )
