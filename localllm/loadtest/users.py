"""Closed-loop virtual users over httpx async streaming.

Each of ``concurrency`` users sends a request, reads its stream to the end,
and sends the next at once (no think time), until the level's request count
or duration is used up; requests already started when the time runs out are
awaited and counted.  Every request ends as exactly one ``RequestResult``, so
``ok + errors + lost == requests`` always holds and nothing disappears.

A level never gets fewer requests than users (the count is raised to the user
count), so every user sends at least one and the load asked for is applied;
``run_level`` counts the requests in flight and reports the peak, so a row
never claims more concurrency than was measured.

Prompts are unique per request (a random opening) so that a server's prefix
cache cannot serve one request from another's work; their length adapts to the
token counts the server reports, so ``prompt_tokens`` is met on any tokenizer.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from localllm import tls
from localllm.api._httpx import httpx
from localllm.loadtest.protocols import Prompt, Target, build_request, parse_line
from localllm.loadtest.stats import LevelSummary, RequestResult, summarize

_WORDS = (
    "the river carries light through a quiet valley where old stone bridges remember "
    "travellers who paused to watch swallows circle above orchards of apple and pear "
    "while clouds gathered slowly over distant hills and a small market opened its "
    "doors to farmers bringing bread cheese honey and wool for the winter months ahead"
).split()


class PromptMaker:
    """Unique prompts of about ``tokens`` tokens, calibrated by what the server counts."""

    def __init__(self, tokens: int, seed: int = 0) -> None:
        self.tokens = max(1, tokens)
        self.rng = random.Random(seed)
        self.tokens_per_word = 1.3  # a first guess for BPE vocabularies; corrected below

    def make(self) -> str:
        words = max(1, round(self.tokens / self.tokens_per_word))
        opening = f"request {self.rng.randrange(10**9)}:"
        body = " ".join(self.rng.choice(_WORDS) for _ in range(words))
        return f"{opening} {body}"

    def observe(self, prompt: str, prompt_tokens: int | None, weight: float = 0.5) -> None:
        """Move the words-to-tokens ratio toward what the server reported.

        Only part of the way by default: counts include the chat template, which
        varies little, so single observations are noisy.  ``weight=1`` adopts it.
        """
        if not prompt_tokens:
            return
        measured = prompt_tokens / max(1, len(prompt.split()))
        self.tokens_per_word += weight * (measured - self.tokens_per_word)


def make_client(target: Target, concurrency: int, timeout: float) -> httpx.AsyncClient:
    """One connection per user; only connecting is bounded apart from ``timeout``."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(
        base_url=target.url.rstrip("/"),
        headers=target.headers(),
        limits=limits,
        timeout=httpx.Timeout(timeout, connect=10.0),
        trust_env=False,
        # An HTTPS daemon is trusted as the other commands trust it (LOCALLLM_TLS_CA too).
        verify=tls.context() if target.url.startswith("https://") else True,
    )


async def send_one(
    client: httpx.AsyncClient, target: Target, prompt: Prompt, max_tokens: int
) -> RequestResult:
    """Send one streamed request and time it; never raises for server or network trouble."""
    path, body = build_request(target, prompt, max_tokens)
    res = RequestResult(start=time.monotonic())
    last = 0.0
    texts: list[str] = []
    try:
        async with client.stream("POST", path, json=body) as resp:
            if resp.status_code >= 400:
                detail = (await resp.aread()).decode("utf-8", "replace").strip()
                res.status, res.error = "error", f"HTTP {resp.status_code}: {detail[:200]}"
                return res
            async for line in resp.aiter_lines():
                chunk = parse_line(target.api, line)
                if chunk is None:
                    continue
                now = time.monotonic()
                if chunk.error:
                    res.status, res.error = "error", chunk.error
                    return res
                if chunk.text:
                    res.chunks += 1
                    texts.append(chunk.text)
                    if res.ttft is None:
                        res.ttft = now - res.start
                    else:
                        res.itl.append(now - last)
                    last = now
                res.prompt_tokens = chunk.prompt_tokens or res.prompt_tokens
                res.output_tokens = chunk.output_tokens or res.output_tokens
                res.prefill_s = chunk.prefill_s or res.prefill_s
                res.decode_s = chunk.decode_s or res.decode_s
                if chunk.done:
                    res.e2e = now - res.start
                    break
    except (httpx.HTTPError, ValueError) as exc:
        res.status, res.error = "lost", f"{exc.__class__.__name__}: {exc}"[:200]
        return res
    res.text = "".join(texts)
    if res.e2e is None:
        res.status, res.error = "lost", "stream ended without its final chunk"
        return res
    if not res.output_tokens:
        res.output_tokens = res.chunks  # servers that don't count: one token per chunk
    if res.ttft is None:
        res.ttft = res.e2e  # nothing generated: the first answer was the last
    return res


@dataclass(frozen=True)
class Workload:
    """What every request of a run looks like."""

    prompt_tokens: int = 128
    output_tokens: int = 64
    # Per level, raised to one per user; None with duration None means 4 per user.
    requests: int | None = None
    duration: float | None = None  # seconds per level
    timeout: float = 600.0

    def requests_for(self, concurrency: int) -> int | None:
        """Requests to run with ``concurrency`` users: never fewer than the users."""
        if self.requests is not None:
            return max(self.requests, concurrency)
        return None if self.duration is not None else max(10, 4 * concurrency)

    def raised_for(self, concurrency: int) -> bool:
        """Whether ``requests`` was too few for ``concurrency`` users and is raised."""
        return self.requests is not None and self.requests < concurrency


Progress = Callable[[int, list[RequestResult], int, float], None]


async def run_level(
    target: Target,
    workload: Workload,
    concurrency: int,
    *,
    prompts: PromptMaker | None = None,
    progress: Progress | None = None,
    client: httpx.AsyncClient | None = None,
) -> tuple[LevelSummary, list[RequestResult]]:
    """Run one concurrency level; ``progress(concurrency, results, in_flight, elapsed)``."""
    prompts = prompts or PromptMaker(workload.prompt_tokens)
    budget = workload.requests_for(concurrency)
    started = 0
    in_flight = 0
    peak = 0
    results: list[RequestResult] = []
    t0 = time.monotonic()
    deadline = t0 + workload.duration if workload.duration is not None else None

    def may_start() -> bool:
        if budget is not None and started >= budget:
            return False
        return deadline is None or time.monotonic() < deadline

    async def user(http: httpx.AsyncClient) -> None:
        nonlocal started, in_flight, peak
        while may_start():
            started += 1
            prompt = prompts.make()
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                res = await send_one(http, target, prompt, workload.output_tokens)
            finally:
                in_flight -= 1
            prompts.observe(prompt, res.prompt_tokens)
            results.append(res)

    async def ticker() -> None:
        while progress is not None:
            progress(concurrency, results, in_flight, time.monotonic() - t0)
            await asyncio.sleep(0.5)

    own = client is None
    http = client or make_client(target, concurrency, workload.timeout)
    tick = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*(user(http) for _ in range(concurrency)))
    finally:
        tick.cancel()
        if own:
            await http.aclose()
    wall = time.monotonic() - t0
    if progress is not None:
        progress(concurrency, results, 0, wall)
    return summarize(concurrency, results, wall, peak_in_flight=peak), results


async def warm_up(
    target: Target, timeout: float = 600.0, prompts: PromptMaker | None = None
) -> RequestResult:
    """One short request so that loading the model is not counted as anyone's TTFT.

    With ``prompts``, the request is a prompt in their style and the count the
    server reports calibrates them, so even a first wave of 50 users gets
    prompts of about the right length.  The probe is kept short: a first guess
    that overshoots the context would be truncated by the server and its count
    would then mislead the calibration.
    """
    probe = PromptMaker(min(prompts.tokens, 256), seed=-1) if prompts else None
    prompt = probe.make() if probe else "Hello"
    async with make_client(target, 1, timeout) as http:
        res = await send_one(http, target, prompt, 2)
    if prompts is not None:
        prompts.observe(prompt, res.prompt_tokens, weight=1.0)
    return res
