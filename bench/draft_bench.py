"""Draft-model speculation: decode speed against the share of drafts the target accepts.

A generated pair with a known acceptance rate: the target is the tests' alphabet
model made costly (16 layers with 2048-wide feed-forward blocks, f32: about
25 ms a token on 2 cores, like a 0.5B Q4_K_M) and set to cycle a..z for ever;
each draft is the one-layer alphabet model with some letters' successors
changed, so it guesses wrong at those letters and right everywhere else.
Greedy decoding of a fixed number of tokens, one slot, runner settings (4096
context, n_batch 512); "off" and "draft" alternate round by round and the
medians of decode tok/s (tokens after the first over wall time after the first)
are printed, with accepted/drafted, the speed-up, and a check that both give the
same text.  The anchor is llama.cpp's llama-server with the same pair (``-md``),
same threads, context and draft settings (``--spec-type draft-simple``,
``--spec-draft-n-max/n-min/p-min``), whose own timings give its decode speed and
draft counts.

Run (on a quiet machine):
  .venv/bin/python bench/draft_bench.py [--rounds 3] [--tokens 256] [--draft 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gen_models  # sibling scripts, not a package: hence the sys.path lines
from server_bench import free_port, wait_up
from spec_bench import decode

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, Done, LoadOptions, SamplingParams
from tests.support.tinymodel import make_tiny_model

SERVER = gen_models.cache_dir() / "llama-tools" / "bin" / "llama-server"
CYCLE = {"z": "a"}  # the target never ends: a..z, a..z, ...
# Drafts wrong at none, 2, 6 and 13 of the 26 letters.
DRAFTS = {
    "agrees": {},
    "2 wrong": {"g": "x", "t": "x"},
    "6 wrong": {c: "x" for c in "cfjmpv"},
    "13 wrong": {c: "x" for c in "acegikmoqsuwy"},
}


def models(threads: int) -> tuple[Path, dict[str, Path]]:
    d = gen_models.cache_dir() / "models" / "draft-pair"
    target = d / "target.gguf"
    if not target.exists():
        make_tiny_model(d, name="target.gguf", n_layer=16, n_ff=2048, overrides=CYCLE)
    drafts = {}
    for name, wrong in DRAFTS.items():
        path = d / f"draft-{name.replace(' ', '-')}.gguf"
        if not path.exists():
            make_tiny_model(d, name=path.name, overrides={**CYCLE, **wrong})
        drafts[name] = path
    return target, drafts


def run_ours(engine: Engine, tokens: int, draft: int, p_min: float) -> tuple[str, float, Done]:
    return decode(
        engine,
        CompletionRequest(
            id=f"r{time.monotonic_ns()}",
            prompt="a",
            num_predict=tokens,
            sampling=SamplingParams(temperature=0.0),
            draft_tokens=draft,
            draft_mode="draft",
            draft_p_min=p_min,
        ),
    )


def run_theirs(target: Path, draft: Path, args: argparse.Namespace) -> tuple[float, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(SERVER),
        "-m",
        str(target),
        "-md",
        str(draft),
        "--spec-type",
        "draft-simple",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(args.threads),
        "-c",
        "4096",
        "-np",
        "1",
        "--spec-draft-n-max",
        str(args.draft),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        str(args.p_min),
    ]
    speeds, counts = [], ""
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            wait_up(url, proc, "/health")
            for _ in range(args.rounds):
                body = json.dumps(
                    {
                        "prompt": "a",
                        "n_predict": args.tokens,
                        "temperature": 0,
                        "cache_prompt": False,
                    }
                ).encode()
                rq = urllib.request.Request(
                    url + "/completion", body, {"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(rq, timeout=600) as resp:
                    t = json.loads(resp.read())["timings"]
                speeds.append(float(t["predicted_per_second"]))
                counts = f"{t.get('draft_n_accepted', '?')}/{t.get('draft_n', '?')}"
        finally:
            proc.terminate()
    return statistics.median(speeds), counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--draft", type=int, default=16)
    ap.add_argument("--p-min", type=float, default=0.75)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    target, drafts = models(args.threads)
    print(
        f"target {target.name} (16 layers, ffn 2048, f32), {args.threads} threads, "
        f"{args.tokens} tokens, draft_max {args.draft}, p_min {args.p_min}, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for name, draft in drafts.items():
        opts = LoadOptions(
            n_ctx=4096,
            n_parallel=1,
            n_batch=512,
            n_ubatch=512,
            n_threads=args.threads,
            draft=str(draft),
        )
        speeds: dict[str, list[float]] = {"off": [], "draft": []}
        texts: dict[str, str] = {}
        last: Done | None = None
        with Engine([str(target)], opts) as engine:
            for _ in range(args.rounds):
                for mode, n in (("off", 0), ("draft", args.draft)):
                    text, speed, done = run_ours(engine, args.tokens, n, args.p_min)
                    speeds[mode].append(speed)
                    texts[mode] = text
                    if n:
                        last = done
        assert last is not None
        off, on = statistics.median(speeds["off"]), statistics.median(speeds["draft"])
        rate = last.accepted / max(1, last.drafted)
        print(
            f"{name:9s} off {off:6.1f} tok/s   draft {on:6.1f} tok/s   on/off {on / off:4.2f}x"
            f"   accepted {last.accepted}/{last.drafted} ({rate:.0%})   "
            f"same text: {texts['off'] == texts['draft']}"
        )
        if SERVER.exists():
            anchor, counts = run_theirs(target, draft, args)
            print(
                f"{'':9s} llama-server -md {anchor:6.1f} tok/s   accepted {counts}   "
                f"ours/theirs {on / anchor:4.2f}x"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
