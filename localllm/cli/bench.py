"""``localllm bench``: load-test our daemon or any Ollama- or OpenAI-compatible server.

Runs closed-loop users at each ``--concurrency`` level and prints TTFT,
inter-token and end-to-end latency percentiles, tokens/s, errors and lost
requests, with the peak number of requests measured in flight; ``--json``/``--plot``
save them.  A level runs at least one request per user: a ``--requests`` count
below the user count is raised to it, with a note.  ``--budget-p95`` predicts how many
users fit a latency budget from the measured rates (``loadtest.budget``) and
then measures at that count to check the prediction.  Exit status 1 when any
request failed or was lost, so the command can gate a CI job.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localllm.api.bodies import Options
    from localllm.loadtest.budget import Level
    from localllm.loadtest.protocols import Target
    from localllm.loadtest.report import BudgetAnswer
    from localllm.loadtest.stats import LevelSummary, RequestResult
    from localllm.loadtest.users import PromptMaker, Workload


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,10,50, not {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be >= 1")
    return levels


def _seconds(text: str) -> float:
    from localllm.config import parse_duration

    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive duration, not {text!r}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="Load-test a model server (ours, Ollama or OpenAI-compatible)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("--model", "-m", required=True, help="model name as the server knows it")
    p.add_argument("--url", help="server base URL (default: the localllm daemon)")
    p.add_argument(
        "--api",
        choices=("ollama", "openai"),
        default="ollama",
        help="wire protocol: /api/* NDJSON or /v1/* SSE (default ollama)",
    )
    p.add_argument(
        "--mode",
        choices=("chat", "completion"),
        default="chat",
        help="chat endpoint, or raw completion (no chat template)",
    )
    p.add_argument(
        "--concurrency",
        "-c",
        type=_levels,
        default=[1, 10, 50],
        help="comma-separated concurrent users per level (default 1,10,50)",
    )
    p.add_argument("--prompt-tokens", type=int, default=128, help="prompt length (default 128)")
    p.add_argument(
        "--output-tokens", type=int, default=64, help="tokens to generate per request (default 64)"
    )
    stop = p.add_mutually_exclusive_group()
    stop.add_argument(
        "--requests",
        "-n",
        type=int,
        help="requests per level, raised to the user count if fewer "
        "(default 4 per user, at least 10)",
    )
    stop.add_argument("--duration", "-d", type=_seconds, help="time per level, e.g. 30s or 2m")
    p.add_argument("--timeout", type=_seconds, default=600.0, help="per-request timeout")
    p.add_argument("--temperature", type=float, help="sampling temperature sent with requests")
    p.add_argument("--api-key", help="Bearer key (default: $LOCALLLM_API_KEY)")
    p.add_argument(
        "--budget-p95",
        type=_seconds,
        metavar="DURATION",
        help="answer how many users fit this p95 end-to-end latency (e.g. 1.5s)",
    )
    p.add_argument(
        "--max-users",
        type=int,
        default=256,
        help="largest user count --budget-p95 will measure (default 256)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="write all figures as JSON")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write a PNG of latency vs users")
    p.add_argument(
        "--no-warmup", action="store_true", help="don't send a first request to load the model"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no live progress line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from localllm import config
    from localllm.loadtest.protocols import Target

    url = args.url
    if url is None:
        from localllm.api.daemon import ensure_daemon

        url = config.client_base_url()
        ensure_daemon(url)
    options: Options = {} if args.temperature is None else {"temperature": args.temperature}
    key = args.api_key if args.api_key is not None else config.API_KEY.get()
    target = Target(
        url=url, model=args.model, api=args.api, mode=args.mode, api_key=key, options=options
    )
    return asyncio.run(_bench(args, target))


async def _bench(args: argparse.Namespace, target: Target) -> int:
    from localllm.loadtest import report
    from localllm.loadtest.budget import check_budget
    from localllm.loadtest.users import PromptMaker, Workload, warm_up

    workload = Workload(
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        requests=args.requests,
        duration=args.duration,
        timeout=args.timeout,
    )
    print(
        f"bench {target.model} at {target.url} ({target.api} {target.mode}): "
        f"~{workload.prompt_tokens} prompt tokens, {workload.output_tokens} output tokens",
        flush=True,
    )
    prompts = PromptMaker(workload.prompt_tokens)
    if not args.no_warmup:
        first = await warm_up(target, workload.timeout, prompts)
        if first.status != "ok":
            print(f"Error: warm-up request failed: {first.error}", file=sys.stderr)
            return 1
    level = _level_runner(target, workload, prompts, show=not args.quiet and sys.stderr.isatty())
    levels = [await level(c) for c in args.concurrency]
    budget = None
    if args.budget_p95 is not None:
        budget, extra = await check_budget(
            args.budget_p95,
            levels,
            level,
            prompt_tokens=args.prompt_tokens,
            output_tokens=args.output_tokens,
            most_users=args.max_users,
        )
        levels = sorted([*levels, *extra], key=lambda lv: lv.concurrency)
    print()
    print(report.table(levels))
    if budget is not None:
        print(budget["summary"])
    _save(args, target, workload, levels, budget)
    return 1 if any(lv.errors or lv.lost for lv in levels) else 0


def _level_runner(target: Target, workload: Workload, prompts: PromptMaker, *, show: bool) -> Level:
    """Runs one concurrency level and prints its line (a live one too, when ``show``)."""
    from localllm.loadtest import report
    from localllm.loadtest.users import run_level

    async def level(c: int) -> LevelSummary:
        total = workload.requests_for(c)
        if workload.raised_for(c):
            print(
                f"  note: {c} users need at least {c} requests; running {total} "
                f"instead of {workload.requests} at this level",
                flush=True,
            )

        def progress(conc: int, results: list[RequestResult], running: int, elapsed: float) -> None:
            if show:
                line = report.progress_line(conc, results, running, elapsed, total)
                sys.stderr.write("\r\x1b[2K" + line)
                sys.stderr.flush()

        summary, _ = await run_level(target, workload, c, prompts=prompts, progress=progress)
        if show:
            sys.stderr.write("\r\x1b[2K")
        print(
            f"  {c} users (peak {summary.peak_in_flight} in flight): "
            f"{summary.ok}/{summary.requests} ok, p95 TTFT "
            f"{report.fmt_s(summary.ttft.p95)}, p95 E2E {report.fmt_s(summary.e2e.p95)}, "
            f"{summary.output_tok_s:.1f} tok/s",
            flush=True,
        )
        return summary

    return level


def _save(
    args: argparse.Namespace,
    target: Target,
    workload: Workload,
    levels: list[LevelSummary],
    budget: BudgetAnswer | None,
) -> None:
    """``--json`` and ``--plot``, where asked for."""
    from localllm.loadtest import report

    if args.json:
        doc = report.document(
            {"url": target.url, "api": target.api, "mode": target.mode, "model": target.model},
            {
                "prompt_tokens": workload.prompt_tokens,
                "output_tokens": workload.output_tokens,
                "requests": workload.requests,
                "duration_s": workload.duration,
                "concurrency": args.concurrency,
            },
            levels,
            budget,
        )
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"figures written to {args.json}")
    if args.plot:
        from localllm.loadtest.plot import latency_plot

        latency_plot(levels, args.plot, args.budget_p95)
        print(f"plot written to {args.plot}")
