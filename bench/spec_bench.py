"""Speculation's default against speculation off, through the daemon (issue 30 §4).

Starts ``localllm serve`` from this checkout (its own LOCALLLM_HOME under the
bench cache, Gemma 3 270M Q4_K_M imported once, 4 slots) and sends raw
``/api/generate`` requests, stream false, ``--tokens`` tokens each, with
``speculative`` unset (the default: ``"auto"`` prompt lookup) and ``"off"``,
alternating and swapping order every round, so drifting load hits both:

  * copy-heavy: a block of code, then the start of the same block again, so the
    base model copies it (code edits, quoting, RAG answers), greedy: goal >= 1.4x;
  * free text: a story opening with nothing to copy, greedy: goal >= 0.98x;
  * counting: numbers in words, where ", " recurs but what follows never does, so
    drafts mostly miss (the cost of trying), greedy: no goal, printed;
  * four sampled streams at once (temperature 0.8, top_k 40, top_p 0.9, fixed
    seeds; Ollama's sampling), aggregate tok/s: goal >= 0.98x.
Rates are the daemon's decode tok/s ((eval_count - 1) / eval_duration) for one
stream and generated tokens over the client's wall time for four; each case
also says whether both modes gave the same text and how many drafts the default
had accepted.  Before each one-stream pair an untimed request warms the cache
with its prompt, so both modes start from the same cells.  The anchor is
llama.cpp's ``llama-lookup`` on the copy-heavy prompt (same GGUF, threads, draft
size), as its decode tok/s against ours.

First, ``--agree`` prompts (default 10) for token-level agreement: each is run
once to warm the cache ("cold", the whole prompt evaluated), then ``"off"``,
unset and ``"ngram"`` from that same warm state, greedy with logprobs.  For each
pair the table gives the tokens before the first difference and, there, the gap
between the two likeliest tokens in the ``"off"`` run: a small gap is a
near-tie that batch-dependent rounding tipped (prompt reuse evaluates a last
token alone; verification evaluates drafts several at a time), which "cold"
against "off" shows without any speculation.

  .venv/bin/python bench/spec_bench.py --repack off         # 5 rounds, ~8 min quiet
  .venv/bin/python bench/spec_bench.py --rounds 1 --tokens 8 --agree 1 --agree-tokens 8
Needs the model (bench/real_model.py fetches it) and, for the anchor,
bench/build_llama_tools.sh.  ``--repack off`` sets LOCALLLM_CPU_REPACK=off and
gives llama-lookup ``--no-repack``: both then compute alike, and llama-lookup
runs where ggml's AMX kernels crash (the daemon's "auto" leaves them out itself).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import daemon_bench  # sibling scripts, not a package: hence the sys.path line
import gen_models
import real_model
import server_bench
import spec_prompts as sp

from localllm.api._httpx import httpx

if TYPE_CHECKING:
    from localllm.engine.engine import Engine
    from localllm.runner.messages import CompletionRequest, Done

LOOKUP = gen_models.cache_dir() / "llama-tools" / "bin" / "llama-lookup"
MODEL = "spec-bench"
SAMPLED: dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}
# (case, goal): ratios unset / off, higher is better.
GOALS = {"copy-heavy": 1.4, "free text": 0.98, "counting": None, "4 sampled streams": 0.98}


def generate(
    http: httpx.Client,
    prompt: str,
    mode: str | None,
    tokens: int,
    *,
    logprobs: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """One raw request, greedy unless ``options`` say otherwise; ``mode`` None: unset."""
    opts: dict[str, Any] = {"temperature": 0, "num_predict": tokens, **options}
    if mode is not None:
        opts["speculative"] = mode
    body: dict[str, Any] = {
        "model": MODEL,
        "prompt": prompt,
        "raw": True,
        "stream": False,
        "options": opts,
    }
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 2}
    r = http.post("/api/generate", json=body)
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


def one_stream(
    http: httpx.Client, prompt: str, mode: str | None, tokens: int
) -> tuple[float, str, dict[str, Any]]:
    d = generate(http, prompt, mode, tokens)
    return (d["eval_count"] - 1) / (d["eval_duration"] / 1e9), d["response"], d


def four_streams(url: str, mode: str | None, tokens: int) -> tuple[float, str, dict[str, Any]]:
    """Four sampled requests at once: generated tokens over the wall time of all four."""

    def go(i: int) -> dict[str, Any]:
        with httpx.Client(base_url=url, timeout=1800, trust_env=False) as http:
            return generate(http, sp.STREAMS[i], mode, tokens, seed=100 + i, **SAMPLED)

    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(go, range(4)))
    wall = time.monotonic() - t0
    drafted = sum(d.get("draft_count", 0) for d in done)
    return (
        sum(d["eval_count"] for d in done) / wall,
        "".join(d["response"] for d in done),
        {
            "draft_count": drafted,
            "draft_accepted_count": sum(d.get("draft_accepted_count", 0) for d in done),
        },
    )


def lookup(gguf: Path, prompt: str, tokens: int, threads: int, repack: str) -> float | None:
    """llama-lookup's decode tok/s on ``prompt`` (None without the tool or its figure)."""
    if not LOOKUP.exists():
        return None
    cmd = [
        str(LOOKUP),
        "-m",
        str(gguf),
        "-p",
        prompt,
        "-n",
        str(tokens),
        "-t",
        str(threads),
        "--spec-draft-n-max",
        "16",
        "-c",
        "4096",
        "--temp",
        "0",
    ]
    out = subprocess.run(
        cmd + (["--no-repack"] if repack == "off" else []),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    m = re.search(
        r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", out.stdout + out.stderr
    )
    return float(m.group(1)) if m else None


def speed(args: argparse.Namespace, url: str, gguf: Path) -> list[str]:
    cases = {"copy-heavy": sp.COPY, "free text": sp.FREE, "counting": sp.COUNT}
    rates: dict[tuple[str, str], list[float]] = {}
    texts: dict[tuple[str, str], str] = {}
    counts: dict[str, dict[str, Any]] = {}
    anchor: list[float] = []
    with httpx.Client(base_url=url, timeout=1800, trust_env=False) as http:
        for rnd in range(args.rounds):
            for name in [*cases, "4 sampled streams"]:
                modes = ["off", "default"] if rnd % 2 == 0 else ["default", "off"]
                if name in cases:
                    # Untimed: both timed runs then reuse this prompt's cells, so both
                    # read their first token from the same logits (a first run, which
                    # evaluates the whole prompt, rounds its last token differently).
                    generate(http, cases[name], "off", 1)
                for mode in modes:
                    spec = None if mode == "default" else "off"
                    if name in cases:
                        rate, text, d = one_stream(http, cases[name], spec, args.tokens)
                    else:
                        rate, text, d = four_streams(url, spec, args.tokens)
                    rates.setdefault((name, mode), []).append(rate)
                    texts[(name, mode)] = text
                    if mode == "default":
                        counts[name] = d
            if args.anchor:
                got = lookup(gguf, sp.COPY, args.tokens, args.threads, args.repack)
                anchor += [got] if got else []
            print(
                f"round {rnd + 1}/{args.rounds}: "
                + ", ".join(
                    f"{n} {rates[(n, 'default')][-1] / rates[(n, 'off')][-1]:.2f}x" for n in GOALS
                )
                + f"; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    lines = [
        "| case | off tok/s | default tok/s | default/off | rounds | goal | same text "
        "| accepted/drafted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, goal in GOALS.items():
        off, on = (statistics.median(rates[(name, m)]) for m in ("off", "default"))
        per = [a / b for a, b in zip(rates[(name, "default")], rates[(name, "off")], strict=True)]
        verdict = "" if goal is None else f">= {goal} {'ok' if on / off >= goal else 'BELOW'}"
        d = counts[name]
        # Four sampled streams share batches whose make-up depends on timing: their
        # texts may differ in any run, so only the one-stream cases are compared.
        same = (texts[(name, "off")] == texts[(name, "default")]) if name in cases else "n/a"
        lines.append(
            f"| {name} | {off:.1f} | {on:.1f} | {on / off:.3f}x | {min(per):.2f}-"
            f"{max(per):.2f} | {verdict} | {same} | "
            f"{d.get('draft_accepted_count', 0)}/{d.get('draft_count', 0)} |"
        )
    if anchor:
        on = statistics.median(rates[("copy-heavy", "default")])
        lines.append(
            f"llama-lookup on copy-heavy: {statistics.median(anchor):.1f} tok/s; "
            f"ours (default) / theirs {on / statistics.median(anchor):.2f}x"
        )
    return lines


def agreement(args: argparse.Namespace, url: str) -> list[str]:
    """Token agreement of unset, "ngram" and the cold run with "off", from one warm state."""
    lines = [
        "| prompt | pair | same tokens | first difference at | top-2 gap there (off) |",
        "|---|---|---|---|---|",
    ]
    same = {"default": 0, "ngram": 0, "cold": 0}
    with httpx.Client(base_url=url, timeout=1800, trust_env=False) as http:
        for i, prompt in enumerate(sp.AGREE[: args.agree]):
            runs = {"cold": generate(http, prompt, "off", args.agree_tokens, logprobs=True)}
            for mode in ("off", "default", "ngram"):
                runs[mode] = generate(
                    http,
                    prompt,
                    None if mode == "default" else mode,
                    args.agree_tokens,
                    logprobs=True,
                )
            base = runs["off"]["logprobs"]
            for other in ("default", "ngram", "cold"):
                lps = runs[other]["logprobs"]
                at = next(
                    (
                        j
                        for j, (x, y) in enumerate(zip(base, lps, strict=False))
                        if x["token"] != y["token"]
                    ),
                    None,
                )
                if at is None and len(base) == len(lps):
                    same[other] += 1
                    lines.append(f"| {i + 1} | {other}/off | {len(base)}/{len(base)} | - | - |")
                    continue
                at = min(len(base), len(lps)) if at is None else at
                top = base[at]["top_logprobs"] if at < len(base) else []
                gap = top[0]["logprob"] - top[1]["logprob"] if len(top) > 1 else float("nan")
                lines.append(
                    f"| {i + 1} | {other}/off | {at}/{len(base)} | {at} "
                    f"({base[at]['token']!r} vs {lps[at]['token']!r}) | {gap:.4f} |"
                    if at < min(len(base), len(lps))
                    else f"| {i + 1} | {other}/off | {at}/{len(base)} | length | - |"
                )
    n = min(args.agree, len(sp.AGREE))
    lines.append(
        "identical token sequences: " + ", ".join(f"{k}/off {v}/{n}" for k, v in same.items())
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="a GGUF (default: Gemma 3 270M Q4_K_M)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--agree", type=int, default=10, help="prompts for agreement (0: none)")
    ap.add_argument("--agree-tokens", type=int, default=128)
    ap.add_argument("--repack", default="", help="LOCALLLM_CPU_REPACK for the daemon")
    ap.add_argument("--no-anchor", dest="anchor", action="store_false", help="skip llama-lookup")
    args = ap.parse_args(argv)
    gguf = Path(args.model) if args.model else real_model.gemma_270m()
    home = gen_models.cache_dir() / "spec-bench-home"
    server_bench.import_model(home, MODEL, gguf)
    # No disk prompt cache: a prompt cached by an earlier run must not make "cold" warm.
    settings = {
        "LOCALLLM_NUM_THREAD": str(args.threads),
        "LOCALLLM_KEEP_ALIVE": "-1",
        "LOCALLLM_NUM_PARALLEL": "4",
        "LOCALLLM_CONTEXT_LENGTH": "4096",
        "LOCALLLM_PROMPT_CACHE_DISK": "0",
    }
    settings |= {"LOCALLLM_CPU_REPACK": args.repack} if args.repack else {}
    logs = gen_models.cache_dir() / "spec-bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    load0, cpu = os.getloadavg()[0], daemon_bench.machine()
    cmd, env, url = server_bench.daemon(home, settings)
    with server_bench.serving(cmd, env, url, "/", logs / "daemon.log"):
        with httpx.Client(base_url=url, timeout=1800, trust_env=False) as http:
            generate(http, "Hello", "off", 1)  # the load, outside every figure
        # Agreement first: its "cold" runs must meet prompts the daemon has not seen.
        agree = agreement(args, url) if args.agree else []
        table = speed(args, url, gguf) if args.rounds else []
    print(
        f"\nmodel {gguf.name}, {args.threads} threads, {args.tokens} tokens, {args.rounds} "
        f"round(s), 4 slots; localllm {daemon_bench.commit()}\ncpu: {cpu['model']}, "
        f"{os.cpu_count()} CPUs; load average {load0:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    print("\n".join(["", *table, "", *agree]))
    return 3 if any("BELOW" in line for line in table) else 0


def decode(engine: Engine, req: CompletionRequest) -> tuple[str, float, Done]:
    """Run ``req`` alone in-process: its text, decode tok/s and Done (draft_bench.py's).

    From an empty cache each time: a reused prefix was computed in other batch shapes,
    whose last-bit differences can flip a near-tie late in a greedy run."""
    from localllm.engine.slots import cut
    from localllm.runner.messages import Done, Piece

    for s in engine.slots:
        cut(engine.ctx, s, 0)
    engine.submit(req)
    text, first, done = "", 0.0, None
    while engine.has_work():
        for ev in engine.step():
            if isinstance(ev, Piece):
                text += ev.text
                first = first or time.perf_counter()
            elif isinstance(ev, Done):
                done = ev
    end = time.perf_counter()
    assert done is not None
    return text, (done.eval_count - 1) / (end - first), done


if __name__ == "__main__":
    raise SystemExit(main())
