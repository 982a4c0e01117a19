"""Engine speed against llama.cpp's own tools, on the same GGUF and thread count.

Measures, interleaving ours and theirs round by round and taking medians:
  * prefill tok/s (pp512) and single-stream decode tok/s (tg128) of our engine
    (``localllm.engine.engine.Engine`` in-process) vs ``llama-bench``;
  * aggregate decode tok/s at 1, 4 and 8 concurrent sequences (our engine with
    n_parallel=8) vs ``llama-batched-bench`` with the same counts.
Each of ours is printed as a ratio to llama.cpp, next to the goals
(decode >= 0.97x, prefill >= 0.95x, aggregate at 4 and 8 above single-stream).

Ours is timed on the wall clock around ``Engine.step()`` (what a caller gets,
Python overhead included); the engine's own Done timings are shown alongside.
Decoding is greedy (llama-bench does not sample at all); ``--sampling ollama``
measures Ollama's default sampler chain instead.

Needs bench/build_llama_tools.sh (anchors); models come from gen_models.py.  Run:
  .venv/bin/python bench/engine_bench.py --model 0.5b-q4_k_m
  .venv/bin/python bench/engine_bench.py --quick      # smoke run, a minute or two
  .venv/bin/python bench/engine_bench.py --ours-only  # e.g. under py-spy
  .venv/bin/python bench/engine_bench.py --runner-shape --parallel 1 \
      --model ~/.cache/localllm-bench/models/gemma-3-270m-q4_k_m.gguf
      # decode in the daemon's own context: 4 slots x 4096 cells
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling script, not a package: hence the sys.path line

TOOLS = gen_models.cache_dir() / "llama-tools" / "bin"
TOKEN_LO, TOKEN_HI = 400, 20000  # ordinary tokens in any vocab we bench (no control/byte ids)


@dataclass
class Cfg:
    model: Path
    threads: int
    rounds: int
    reps: int
    pp: int
    tg: int
    npp: int
    ntg: int
    npl: list[int]
    greedy: bool
    ours_only: bool
    runner_shape: bool = False
    ngl: int = 0  # layers on the GPU, both sides (llama-bench -ngl)


@dataclass
class Results:
    ours: dict[str, list[float]] = field(default_factory=dict)
    theirs: dict[str, list[float]] = field(default_factory=dict)

    def add(self, side: str, key: str, value: float) -> None:
        getattr(self, side).setdefault(key, []).append(value)
        print(f"  {side:6} {key:9} {value:8.1f} tok/s", flush=True)  # survives an interrupted run

    def med(self, side: str, key: str) -> float | None:
        vals = getattr(self, side).get(key)
        return statistics.median(vals) if vals else None

    def spread(self, side: str, key: str) -> str:
        """(max - min) / median over all samples: how much the machine's load moved them."""
        vals = getattr(self, side).get(key) or []
        if len(vals) < 2:
            return "-"
        return f"{(max(vals) - min(vals)) / statistics.median(vals):.0%}"


# ---- ours ---------------------------------------------------------------------------


def make_engine(cfg: Cfg, n_parallel: int, n_ctx: int):  # -> Engine
    from localllm.engine.engine import Engine
    from localllm.runner.messages import LoadOptions

    # Same context shape as the llama.cpp tools: f16 KV, flash attention left to
    # llama.cpp ("auto", their default too), one 512-token ubatch.
    opts = LoadOptions(
        n_ctx=n_ctx,
        n_parallel=n_parallel,
        n_batch=512,
        n_ubatch=512,
        n_threads=cfg.threads,
        flash_attn="auto",
        kv_type="f16",
        n_gpu_layers=cfg.ngl,
    )
    return Engine([str(cfg.model)], opts)


def run_requests(eng, prompts: list[list[int]], num_predict: int, greedy: bool):
    """Submit all prompts at once and step until done; per request: submit time,
    the wall time of each generated piece, and the Done event."""
    from localllm.runner.messages import CompletionRequest, Done, Failed, Piece, SamplingParams

    sp = SamplingParams(temperature=0.0) if greedy else SamplingParams()
    ids = [f"b{random.getrandbits(48):x}" for _ in prompts]
    t_sub = time.perf_counter()
    for rid, p in zip(ids, prompts, strict=True):
        eng.submit(CompletionRequest(id=rid, prompt=p, sampling=sp, num_predict=num_predict))
    times: dict[str, list[float]] = {rid: [] for rid in ids}
    done: dict[str, Done] = {}
    while eng.has_work():
        events = eng.step()
        t = time.perf_counter()
        for ev in events:
            if isinstance(ev, Piece):
                times[ev.id].append(t)
            elif isinstance(ev, Done):
                done[ev.id] = ev
                if not times[ev.id]:  # a Done that carries the last token itself
                    times[ev.id].append(t)
            elif isinstance(ev, Failed):
                raise SystemExit(f"engine failed a request: {ev.message}")
    return t_sub, [(times[r], done[r]) for r in ids]


def rand_prompt(n: int) -> list[int]:
    # Fresh random tokens each time so prefix reuse never skips work.
    return [random.randrange(TOKEN_LO, TOKEN_HI) for _ in range(n)]


def ours_pp(eng, cfg: Cfg, res: Results) -> None:
    for _ in range(cfg.reps):
        t_sub, [(times, done)] = run_requests(eng, [rand_prompt(cfg.pp)], 1, cfg.greedy)
        assert done.cached_tokens == 0, "prefix reuse kicked in; prompts must differ"
        res.add("ours", "pp", cfg.pp / (times[0] - t_sub))
        if done.prompt_eval_ns:
            res.add("ours", "pp_engine", done.prompt_tokens / done.prompt_eval_ns * 1e9)


def ours_tg(eng, cfg: Cfg, res: Results) -> None:
    for _ in range(cfg.reps):
        # llama-bench's tg starts from an empty context with one token.
        # A real model may end its reply at once for some token: try another start
        # (llama-bench never samples, so it never stops).
        for _ in range(20):
            _, [(times, done)] = run_requests(eng, [rand_prompt(1)], cfg.tg, cfg.greedy)
            if done.eval_count >= cfg.tg:
                break
        else:
            raise SystemExit(f"decode stopped early ({done.eval_count}/{cfg.tg}: {done.reason})")
        res.add("ours", "tg", (len(times) - 1) / (times[-1] - times[0]))
        if done.eval_ns:
            res.add("ours", "tg_engine", done.eval_count / done.eval_ns * 1e9)


def ours_parallel(eng, cfg: Cfg, res: Results, k: int) -> None:
    for _ in range(cfg.reps):
        _, out = run_requests(eng, [rand_prompt(cfg.npp) for _ in range(k)], cfg.ntg, cfg.greedy)
        # Count only the window in which all k sequences decode together, as
        # llama-batched-bench's S_TG does (its prompts all finish before any decode).
        t0 = max(times[0] for times, _ in out)
        t1 = min(times[-1] for times, _ in out)
        n = sum(sum(1 for t in times if t0 < t <= t1) for times, _ in out)
        if t1 > t0 and n:
            res.add("ours", f"agg{k}", n / (t1 - t0))


# ---- theirs -------------------------------------------------------------------------


def tool(name: str) -> Path:
    p = TOOLS / name
    if not p.exists():
        raise SystemExit(f"{p} is missing: run bench/build_llama_tools.sh first")
    return p


def json_lines(text: str) -> list[dict]:
    return [json.loads(s) for s in text.splitlines() if s.strip().startswith("{")]


def theirs_single(cfg: Cfg, res: Results, what: str) -> None:
    pp, tg = (cfg.pp, 0) if what == "pp" else (0, cfg.tg)
    cmd = [
        str(tool("llama-bench")),
        "-m",
        str(cfg.model),
        "-p",
        str(pp),
        "-n",
        str(tg),
        "-t",
        str(cfg.threads),
        "-r",
        str(cfg.reps),
        "-ngl",
        str(cfg.ngl),
        "-o",
        "json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800)
    for row in json.loads(out.stdout):
        key = "pp" if row["n_gen"] == 0 else "tg"
        res.add("theirs", key, float(row["avg_ts"]))


def theirs_parallel(cfg: Cfg, res: Results, k: int) -> None:
    # -kvu: one KV buffer for all sequences, as our engine has (its slots share
    # prefixes through it); without it each sequence attends over its own cells only.
    cmd = [
        str(tool("llama-batched-bench")),
        "-m",
        str(cfg.model),
        "-kvu",
        "-c",
        str(k * (cfg.npp + cfg.ntg)),
        "-b",
        "2048",
        "-ub",
        "512",
        "-npp",
        str(cfg.npp),
        "-ntg",
        str(cfg.ntg),
        "-npl",
        str(k),
        "-t",
        str(cfg.threads),
        "-ngl",
        str(cfg.ngl),
        "--output-format",
        "jsonl",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800)
    for row in json_lines(out.stdout + "\n" + out.stderr):
        res.add("theirs", f"agg{row['pl']}", float(row["speed_tg"]))


# ---- report -------------------------------------------------------------------------


def report(cfg: Cfg, res: Results, load: tuple[float, float]) -> None:
    rows: list[tuple[str, ...]] = []

    def row(label: str, key: str, goal: float | None) -> None:
        o, t = res.med("ours", key), res.med("theirs", key)
        ratio = o / t if o and t else None
        verdict = "" if goal is None or ratio is None else ("ok" if ratio >= goal else "BELOW")
        rows.append(
            (
                label,
                f"{o:.1f}" if o else "-",
                f"{t:.1f}" if t else "-",
                f"{ratio:.3f}" if ratio else "-",
                "" if goal is None else f">={goal:.2f} {verdict}",
                f"{res.spread('ours', key)}/{res.spread('theirs', key)}",
            )
        )

    row(f"prefill pp{cfg.pp}", "pp", 0.95)
    row(f"decode tg{cfg.tg}", "tg", 0.97)
    for k in cfg.npl:
        row(f"aggregate decode x{k}", f"agg{k}", None)
    print()
    shape = (
        "4 slots x 4096 cells (the runner's default)"
        if cfg.runner_shape
        else f"1 slot x {cfg.pp + cfg.tg + 64} cells"
    )
    print(
        f"model {cfg.model.name}  threads {cfg.threads}  rounds {cfg.rounds} x reps {cfg.reps}"
        f"  sampling {'greedy' if cfg.greedy else 'ollama defaults'}  single-stream context "
        f"{shape}  gpu layers {cfg.ngl}"
    )
    head = ("metric", "ours tok/s", "llama.cpp", "ratio", "goal", "spread ours/theirs")
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, tuple("-" * n for n in w), *rows]:
        print("  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)))
    for key, label in (("pp_engine", "prefill"), ("tg_engine", "decode")):
        if res.med("ours", key):
            print(f"(engine-reported {label}: {res.med('ours', key):.1f} tok/s)")
    single = res.med("ours", "agg1") or res.med("ours", "tg")
    for k in cfg.npl:
        agg = res.med("ours", f"agg{k}")
        if k > 1 and agg and single:
            state = "ok" if agg > single else "BELOW"
            print(f"aggregate x{k} vs single-stream: {agg / single:.2f}x (goal > 1: {state})")
    # The benchmark itself adds ~threads to the load, so only the "before" figure
    # tells whether someone else was using the CPUs.
    busy = load[0] > 0.5 * (os.cpu_count() or 1)
    print(
        f"load average {load[0]:.2f} before, {load[1]:.2f} after, on {os.cpu_count()} CPUs"
        + (": SHARED machine, treat as indicative" if busy else "")
    )
    print(
        "for final figures rerun on a quiet machine: .venv/bin/python bench/engine_bench.py "
        + " ".join(sys.argv[1:])
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        default="0.5b-q4_k_m",
        help="<size>-<quant> from gen_models (0.5b|1b, f16|q4_k_m|q8_0) or a GGUF path",
    )
    ap.add_argument("--threads", type=int, default=0, help="0 = physical cores (as both sides)")
    ap.add_argument("--rounds", type=int, help="ours/theirs alternations (3; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="short prompts/generations, 1 round")
    ap.add_argument("--sampling", choices=["greedy", "ollama"], default="greedy")
    ap.add_argument("--parallel", default="1,4,8", help="concurrent sequence counts")
    ap.add_argument("--ours-only", action="store_true", help="skip the llama.cpp tools")
    ap.add_argument(
        "--runner-shape",
        action="store_true",
        help="single stream in the daemon's default context: 4 slots x 4096 "
        "cells (else one slot just big enough, as llama-bench's)",
    )
    ap.add_argument(
        "--ngl",
        type=int,
        default=0,
        help="layers offloaded to the GPU on both sides (99: all; needs a GPU "
        "plugin and GPU builds of the llama.cpp tools)",
    )
    a = ap.parse_args(argv)

    model = gen_models.resolve(a.model)
    threads = a.threads or physical_cores()
    q = a.quick
    cfg = Cfg(
        model=model,
        threads=threads,
        rounds=a.rounds or (1 if q else 3),
        reps=1 if q else 3,
        pp=128 if q else 512,
        tg=32 if q else 128,
        npp=32 if q else 128,
        ntg=32 if q else 128,
        npl=[int(x) for x in a.parallel.split(",")],
        greedy=a.sampling == "greedy",
        ours_only=a.ours_only,
        runner_shape=a.runner_shape,
        ngl=a.ngl,
    )
    res = Results()
    load0 = os.getloadavg()[0]
    single = (
        make_engine(cfg, 4, 4096) if cfg.runner_shape else make_engine(cfg, 1, cfg.pp + cfg.tg + 64)
    )
    run_requests(single, [rand_prompt(16)], 8, cfg.greedy)  # warm-up, like both tools do
    # Pair each measurement of ours with the same one of theirs, back to back, and
    # swap who goes first every round, so load from other users drifts out evenly.
    for r in range(cfg.rounds):
        print(f"round {r + 1}/{cfg.rounds}: single stream", flush=True)
        for what, ours in (("pp", ours_pp), ("tg", ours_tg)):
            pair = [partial(ours, single, cfg, res), partial(theirs_single, cfg, res, what)]
            run_pair(pair, r, cfg.ours_only)
    single.close()
    multi = make_engine(cfg, max(cfg.npl), cfg.npp + cfg.ntg + 64)
    run_requests(multi, [rand_prompt(16)], 8, cfg.greedy)
    for r in range(cfg.rounds):
        print(f"round {r + 1}/{cfg.rounds}: parallel {cfg.npl}", flush=True)
        for k in cfg.npl:
            pair = [
                partial(ours_parallel, multi, cfg, res, k),
                partial(theirs_parallel, cfg, res, k),
            ]
            run_pair(pair, r, cfg.ours_only)
    multi.close()
    report(cfg, res, (load0, os.getloadavg()[0]))
    return 0


def run_pair(pair: list[Callable[[], None]], rnd: int, ours_only: bool) -> None:
    """Run [ours, theirs], theirs first on odd rounds; only ours with --ours-only."""
    for fn in pair[:1] if ours_only else pair[:: 1 if rnd % 2 == 0 else -1]:
        fn()


def physical_cores() -> int:
    # llama-bench's default is the physical core count; match it on both sides.
    from localllm.hardware.cpu import cpu_info

    return max(1, int(cpu_info().physical_cores))


if __name__ == "__main__":
    sys.exit(main())
