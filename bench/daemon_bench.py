"""The path users take: ``/api/generate`` through the real daemon against llama-bench.

Starts ``localllm serve`` from this checkout (its own LOCALLLM_HOME in the bench
cache; the daemon's default slots and context unless --parallel/--ctx) and, in each
round, sends a raw prompt of --prompt-tokens asking for --output-tokens (greedy),
with ``stream: false`` and with ``stream: true``, and runs ``llama-bench`` on the
same GGUF and threads: pp<P>, and tg<G> at depth P (decode after the prompt, as
ours).  Ours and theirs swap order every round, so drifting load hits both.
Printed: medians, the spread between rounds, the ratio to llama-bench and the range
of single rounds' ratios, of
  * the daemon's timings: prefill (prompt_eval_count / prompt_eval_duration) and
    decode ((eval_count - 1) / eval_duration: the first token comes from the
    prompt's logits, so eval_duration spans eval_count - 1 steps), both modes;
  * the client's clock: TTFT (against P/pp), decode from the first streamed token
    to the last, the whole request (against P/pp + (G-1)/tg);
with lscpu's model name and flags, the load average before and after, both
commits.  Goal (issue 30): daemon prefill and decode >= 0.98x (else exit 3).
Each prompt opens with its own word, drawn per run: no request, nor a prompt
cache kept from an earlier run, reuses another's prefix beyond BOS.

Needs bench/build_llama_tools.sh.  Single rounds swing by +-15% on a shared
machine: use >= 7 rounds.
  .venv/bin/python bench/daemon_bench.py            # 0.5b-q4_k_m, 9 rounds, ~6 min
  .venv/bin/python bench/daemon_bench.py --rounds 1 --model 0.5b-f16 \\
      --prompt-tokens 128 --output-tokens 16        # smoke run, ~1 min
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling scripts, not a package: hence the sys.path line
import gpu_check_measure as gcm
import server_bench
from server_bench import REPO, TOOLS

from localllm.api._httpx import httpx
from localllm.loadtest.protocols import Target, build_request
from localllm.loadtest.users import make_client, send_one

GOAL = 0.98
# (key, label, goal): rates whose ratio is ours / llama-bench, higher is better.
ROWS = (
    ("prefill", "prefill tok/s, daemon timings, stream false", GOAL),
    ("prefill_s", "prefill tok/s, daemon timings, stream true", GOAL),
    ("decode", "decode tok/s, daemon timings, stream false", GOAL),
    ("decode_s", "decode tok/s, daemon timings, stream true", GOAL),
    ("ttft_rate", "prompt tokens / client TTFT, stream true", None),
    ("client_decode", "decode tok/s, client (first to last chunk)", None),
    ("e2e", "tokens / client wall time, stream false", None),
    ("e2e_s", "tokens / client wall time, stream true", None),
)


def machine() -> dict[str, str]:
    """lscpu's model name and flags (the SIMD a kernel may use decides its speed)."""
    try:
        text = subprocess.run(
            ["lscpu"], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"}
        ).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    if "Flags" not in text:  # no lscpu: /proc/cpuinfo has the same two fields
        text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return {"model": fields.get("model name", "unknown"), "flags": fields.get("flags", "")}


def spread(values: list[float]) -> float:
    """(max - min) / median: how far the rounds moved."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def anchor_rates(r: dict[str, float], prompt: float, gen: int) -> dict[str, float]:
    """llama-bench's figures in the units of each row: the rates a client would see."""
    t_pp, t_tg = prompt / r["pp"], (gen - 1) / r["tg"]
    e2e = (prompt + gen) / (t_pp + t_tg)
    return {
        "prefill": r["pp"],
        "prefill_s": r["pp"],
        "decode": r["tg"],
        "decode_s": r["tg"],
        "ttft_rate": r["pp"],
        "client_decode": r["tg"],
        "e2e": e2e,
        "e2e_s": e2e,
    }


def summarize(rounds: list[dict[str, Any]], prompt: float, gen: int) -> list[dict[str, Any]]:
    """One row per metric: medians, spreads, ratio of medians, range of per-round ratios."""
    rows = []
    for key, label, goal in ROWS:
        ours = [r["ours"][key] for r in rounds if key in r["ours"]]
        theirs = [anchor_rates(r["theirs"], prompt, gen)[key] for r in rounds]
        if not ours:
            continue
        per_round = [
            r["ours"][key] / anchor_rates(r["theirs"], prompt, gen)[key]
            for r in rounds
            if key in r["ours"]
        ]
        ratio = statistics.median(ours) / statistics.median(theirs)
        rows.append(
            {
                "key": key,
                "label": label,
                "goal": goal,
                "ours": statistics.median(ours),
                "theirs": statistics.median(theirs),
                "ratio": ratio,
                "round_ratios": per_round,
                "spread_ours": spread(ours),
                "spread_theirs": spread(theirs),
                "met": None if goal is None else ratio >= goal,
            }
        )
    return rows


# ---- ours: one request through the daemon --------------------------------------------


async def calibrate(
    http: httpx.AsyncClient, target: Target, tokens: int, salt: int
) -> tuple[int, int]:
    """Words for a prompt of about ``tokens`` tokens, and their count (the first call loads)."""
    n_words, tries = max(4, round(tokens * 0.6)), []
    for i in range(6):
        path, body = build_request(target, gcm.make_prompt(n_words, salt + i), 1)
        r = await http.post(path, json={**body, "stream": False})
        r.raise_for_status()
        n = int(r.json()["prompt_eval_count"])
        tries.append((abs(n - tokens), n_words, n))
        if abs(n - tokens) <= 2:
            break
        n_words = max(4, round(n_words * (tokens - 1) / max(n - 1, 1)))
    _, n_words, n = min(tries)  # a word may hold more tokens than the tolerance
    return n_words, n


async def ours(
    http: httpx.AsyncClient, target: Target, prompt: str, gen: int, stream: bool
) -> dict[str, float]:
    """One request; the daemon's rates and the client's, keyed as ROWS (``_s``: streamed)."""
    sfx, client = "_s" if stream else "", {}
    if stream:
        res = await send_one(http, target, prompt, gen)
        if res.status != "ok":
            raise RuntimeError(f"/api/generate (stream): {res.error}")
        n_prompt, n_gen = res.prompt_tokens or 0, res.output_tokens
        prefill_s, decode_s, wall = res.prefill_s, res.decode_s, res.e2e or 0.0
        if res.ttft and sum(res.itl):  # the gaps run from the first text chunk to the last
            client = {
                "ttft": res.ttft,
                "ttft_rate": n_prompt / res.ttft,
                "client_decode": (n_gen - 1) / sum(res.itl),
            }
    else:
        path, body = build_request(target, prompt, gen)
        t0 = time.monotonic()
        r = await http.post(path, json={**body, "stream": False})
        wall = time.monotonic() - t0
        r.raise_for_status()
        d = r.json()
        n_prompt, n_gen = d["prompt_eval_count"], d["eval_count"]
        prefill_s, decode_s = d["prompt_eval_duration"] / 1e9, d["eval_duration"] / 1e9
    if n_gen != gen:
        print(f"    note: {n_gen} tokens generated, not {gen} (the model stopped)")
    out = {
        "prompt_tokens": n_prompt,
        "eval_count": n_gen,
        "wall" + sfx: wall,
        "e2e" + sfx: (n_prompt + n_gen) / wall,
        **client,
    }
    if prefill_s and decode_s:
        out |= {"prefill" + sfx: n_prompt / prefill_s, "decode" + sfx: (n_gen - 1) / decode_s}
    return out


# ---- theirs: llama-bench -------------------------------------------------------------


def theirs(
    args: argparse.Namespace, gguf: Path, what: str, prompt: int, logs: Path
) -> tuple[float, str]:
    """llama-bench's pp<prompt>, or tg<G> at depth <prompt>: median tok/s, build commit."""
    pp, tg, depth = (prompt, 0, 0) if what == "pp" else (0, args.output_tokens, prompt)
    cmd = [
        "-m",
        str(gguf),
        "-p",
        str(pp),
        "-n",
        str(tg),
        "-d",
        str(depth),
        "-t",
        str(args.threads),
        "-ngl",
        str(args.ngl),
        "-r",
        str(args.reps),
    ]
    if args.no_repack:
        cmd += ["--repack", "0"]
    rows = gcm.run_bench(str(TOOLS / "llama-bench"), cmd, logs / f"llama-bench-{what}")
    row = gcm._row(rows, pp, tg, depth)
    return float(row["median_ts"]), str(row.get("build_commit"))


# ---- the run -------------------------------------------------------------------------


async def measure(
    args: argparse.Namespace, gguf: Path, url: str, logs: Path
) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    target = Target(url, args.name, api="ollama", mode="completion", options={"temperature": 0})
    salt = random.randrange(10**9)  # a prompt cache kept from an earlier run must not hit
    async with make_client(target, 1, 1800) as http:
        n_words, prompt = await calibrate(http, target, args.prompt_tokens, salt)
        salt += 100
        await ours(http, target, gcm.make_prompt(n_words, salt), args.output_tokens, True)
        ps = (await http.get("/api/ps")).json().get("models") or [{}]
        print(
            f"prompt: {n_words} words = {prompt} tokens; daemon context "
            f"{ps[0].get('context_length')}, {ps[0].get('size_vram', 0) >> 20} MiB in VRAM",
            flush=True,
        )
        rounds: list[dict[str, Any]] = []
        tags = itertools.count(salt + 1)
        for rnd in range(args.rounds):
            got: dict[str, Any] = {"ours": {}, "theirs": {}, "load": os.getloadavg()[0]}
            order = ["stream false", "stream true", "pp", "tg"]
            for what in order if rnd % 2 == 0 else order[::-1]:
                if what in ("pp", "tg"):
                    got["theirs"][what], got["build"] = theirs(args, gguf, what, prompt, logs)
                    continue
                vals = [
                    await ours(
                        http,
                        target,
                        gcm.make_prompt(n_words, next(tags)),
                        args.output_tokens,
                        what == "stream true",
                    )
                    for _ in range(args.reps)
                ]
                got["ours"] |= {k: statistics.median(v[k] for v in vals if k in v) for k in vals[0]}
            rounds.append(got)
            o, t = got["ours"], got["theirs"]
            print(
                f"round {rnd + 1}/{args.rounds}: prefill {o.get('prefill', 0):.1f} vs "
                f"{t['pp']:.1f} ({o.get('prefill', 0) / t['pp']:.3f}x), decode "
                f"{o.get('decode', 0):.1f} vs {t['tg']:.1f} "
                f"({o.get('decode', 0) / t['tg']:.3f}x); load {got['load']:.2f}",
                flush=True,
            )
    return rounds, prompt, ps[0]


def report(args: argparse.Namespace, gguf: Path, info: dict[str, Any]) -> list[str]:
    rows, cpu, cpus = info["rows"], info["cpu"], os.cpu_count() or 1
    lines = [
        f"model {gguf.name}, {args.threads} threads, {info['prompt']}-token prompt then "
        f"{args.output_tokens} tokens, greedy, {args.rounds} round(s) x {args.reps}, "
        f"llama-bench -ngl {args.ngl}{' --repack 0' if args.no_repack else ''}; daemon context "
        f"{info['ps'].get('context_length')}; localllm {info['commit']}, llama-bench "
        f"build {info['bench_commit']}",
        f"cpu: {cpu['model']}, {cpus} CPUs; flags: {cpu['flags']}",
        # The run itself adds about --threads, so only "before" shows other users.
        f"load average {info['load'][0]:.2f} before, {info['load'][1]:.2f} after"
        + (" (a SHARED machine: indicative)" if info["load"][0] > 0.5 * cpus else ""),
        "",
        "| metric | ours | llama-bench | ratio | single rounds | spread ours/theirs | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        goal = "" if r["goal"] is None else (f">= {r['goal']:.2f} {'ok' if r['met'] else 'BELOW'}")
        lines.append(
            f"| {r['label']} | {r['ours']:.1f} | {r['theirs']:.1f} | "
            f"{r['ratio']:.3f}x | {min(r['round_ratios']):.2f}-"
            f"{max(r['round_ratios']):.2f} | {r['spread_ours']:.0%}/"
            f"{r['spread_theirs']:.0%} | {goal} |"
        )
    ttft = [r["ours"]["ttft"] for r in info["rounds"] if "ttft" in r["ours"]]
    pp = statistics.median(r["theirs"]["pp"] for r in info["rounds"])
    if ttft:
        lines.append(
            f"TTFT median {statistics.median(ttft) * 1000:.0f} ms, single rounds "
            f"{min(ttft) * 1000:.0f}-{max(ttft) * 1000:.0f} ms; llama-bench's "
            f"pp{info['prompt']} takes {info['prompt'] / pp * 1000:.0f} ms"
        )
    lines.append(
        f"llama-bench: pp{info['prompt']} and tg{args.output_tokens} at depth "
        f"{info['prompt']}; client rows count the TTFT against P/pp and the whole "
        f"request against P/pp + (G-1)/tg"
    )
    if args.rounds < 7:
        lines.append(f"only {args.rounds} round(s): indicative, not a measurement (use >= 7)")
    return lines


def commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *a], capture_output=True, text=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        " (+changes)" if git("status", "-uno", "--porcelain") else ""
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="0.5b-q4_k_m", help="<size>-<quant> or a GGUF path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument(
        "--reps",
        type=int,
        default=1,
        help="requests per stream mode, and llama-bench -r, in each round",
    )
    ap.add_argument("--parallel", type=int, default=0, help="daemon slots (0: its default)")
    ap.add_argument("--ctx", type=int, default=0, help="daemon context per slot (0: default)")
    ap.add_argument("--ngl", type=int, default=0, help="llama-bench -ngl (99 on a GPU)")
    ap.add_argument(
        "--no-repack",
        action="store_true",
        help="llama-bench --repack 0, LOCALLLM_CPU_REPACK=off (where AMX crashes)",
    )
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a daemon setting (repeatable), e.g. LOCALLLM_FLASH_ATTENTION=0",
    )
    ap.add_argument("--json", type=Path, help="write every round's figures here")
    args = ap.parse_args(argv)
    gguf = gen_models.resolve(args.model)
    if not (TOOLS / "llama-bench").exists():
        sys.exit("llama-bench missing: run bench/build_llama_tools.sh")
    load0 = os.getloadavg()[0]
    args.name = "bench-" + "".join(
        c if c.isalnum() or c in "._" else "-" for c in gguf.stem.lower()
    )
    home = gen_models.cache_dir() / "daemon-bench-home"
    server_bench.import_model(home, args.name, gguf)
    settings = {"LOCALLLM_NUM_THREAD": str(args.threads), "LOCALLLM_KEEP_ALIVE": "-1"}
    settings |= {"LOCALLLM_NUM_PARALLEL": str(args.parallel)} if args.parallel else {}
    settings |= {"LOCALLLM_CONTEXT_LENGTH": str(args.ctx)} if args.ctx else {}
    # llama-bench --repack 0 drops every extra buffer type (AMX and CPU_REPACK); the
    # daemon's "auto" would keep CPU_REPACK: "off" makes both compute alike.
    settings |= {"LOCALLLM_CPU_REPACK": "off"} if args.no_repack else {}
    settings |= dict(kv.split("=", 1) for kv in args.env)
    logs = gen_models.cache_dir() / "daemon-bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    cmd, env, url = server_bench.daemon(home, settings)
    with server_bench.serving(cmd, env, url, "/", logs / "daemon.log"):
        print(
            f"daemon at {url} ({' '.join(f'{k}={v}' for k, v in settings.items())}); "
            f"logs in {logs}",
            flush=True,
        )
        rounds, prompt, ps = asyncio.run(measure(args, gguf, url, logs))
    info = {
        "rows": summarize(rounds, prompt, args.output_tokens),
        "cpu": machine(),
        "prompt": prompt,
        "ps": ps,
        "commit": commit(),
        "rounds": rounds,
        "bench_commit": rounds[-1].get("build", "?"),
        "load": (load0, os.getloadavg()[0]),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print("\n" + "\n".join(report(args, gguf, info)))
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 3 if any(r["met"] is False for r in info["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
