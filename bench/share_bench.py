"""Shared system prompts: time to first token of 8 users, sharing on and off.

Eight requests open with the same ~1,000-token system prompt and end with
different questions (8 slots, the runner's batch settings, greedy); each one's
time to first token is taken from its own submission.  Two arrival patterns:
  * together: all eight are submitted at once, so user 1 waits for the same
    prefill as the others and "users 2..8 / user 1" cannot go below 1;
  * after-first: user 1 comes alone, and users 2..8 arrive together as soon as
    user 1's first token is out (its prompt is in the cache and it is still
    generating): the case of an agent or RAG app whose system prompt is already
    being served when the next users come.
With prefix sharing (engine/sharing.py) a slot takes over the cells of the
system prompt that another slot holds or is evaluating; without it every slot
evaluates the prompt itself.  Printed for each pattern: user 1's TTFT, the p50
and max of users 2..8, the ratio p50 / user 1 (goal <= 0.2, after-first),
whether the replies are the same both ways, and the ratio of the sharing run's
p50 to the run without it.  The anchor is llama-server with the same 8 slots and
prompts (``build_llama_tools.sh``), whose slots reuse only their own cache.

Run (on a quiet machine):  .venv/bin/python bench/share_bench.py [--arrival both]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling scripts, not a package: hence the sys.path line
import real_model

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, LoadOptions, Piece, SamplingParams

RULES = (
    "You are the support assistant of a bicycle shop. Answer in two sentences at most. "
    "Mention prices in euros, never promise delivery dates, and suggest visiting the "
    "workshop for anything involving brakes, forks or wheels. "
)
QUESTIONS = [
    "How much is a new chain?",
    "Do you sell helmets?",
    "Can you fix a flat tyre?",
    "What are your opening hours?",
    "Is the workshop open on Sunday?",
    "Do you rent bikes?",
    "How long does a service take?",
    "Can I pay by card?",
]
SERVER = gen_models.cache_dir() / "llama-tools" / "bin" / "llama-server"


def system_prompt(engine: Engine, tokens: int) -> str:
    text = ""
    while len(engine.tokenize(text)) < tokens:
        text += RULES
    return text


def ours(
    engine: Engine, system: str, n_predict: int, after_first: bool
) -> tuple[list[float], list[str]]:
    ids = [f"u{i}-{time.monotonic_ns()}" for i in range(len(QUESTIONS))]
    submitted: dict[str, float] = {}

    def submit(i: int) -> None:
        submitted[ids[i]] = time.perf_counter()
        engine.submit(
            CompletionRequest(
                id=ids[i],
                prompt=system + "\nQuestion: " + QUESTIONS[i] + "\nAnswer:",
                num_predict=n_predict,
                sampling=SamplingParams(temperature=0.0),
            )
        )

    for i in range(1 if after_first else len(ids)):
        submit(i)
    first: dict[str, float] = {}
    texts = dict.fromkeys(ids, "")
    while engine.has_work():
        for ev in engine.step():
            if isinstance(ev, Piece):
                first.setdefault(ev.id, time.perf_counter() - submitted[ev.id])
                texts[ev.id] += ev.text
        if len(submitted) == 1 and ids[0] in first:  # after-first: the others come now
            for i in range(1, len(ids)):
                submit(i)
    return [first[i] for i in ids], [texts[i] for i in ids]


def theirs(
    model: Path, system: str, n_predict: int, threads: int, after_first: bool
) -> list[float] | None:
    if not SERVER.exists():
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            str(SERVER),
            "-m",
            str(model),
            "--port",
            str(port),
            "-np",
            "8",
            "-c",
            str(8 * 2048),
            "-t",
            str(threads),
            "-b",
            "512",
            "-ub",
            "512",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)

        first_token = threading.Event()

        def one(q: str) -> float:
            body = json.dumps(
                {
                    "prompt": system + "\nQuestion: " + q + "\nAnswer:",
                    "n_predict": n_predict,
                    "temperature": 0,
                    "stream": True,
                    "cache_prompt": True,
                }
            ).encode()
            t0 = time.perf_counter()
            r = urllib.request.urlopen(
                urllib.request.Request(
                    url + "/completion", data=body, headers={"Content-Type": "application/json"}
                )
            )
            for line in r:
                if line.startswith(b"data: ") and json.loads(line[6:]).get("content"):
                    ttft = time.perf_counter() - t0
                    first_token.set()
                    r.read()
                    return ttft
            return time.perf_counter() - t0

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            if not after_first:
                return list(pool.map(one, QUESTIONS))
            user1 = pool.submit(one, QUESTIONS[0])
            first_token.wait(600)
            rest = list(pool.map(one, QUESTIONS[1:]))
            return [user1.result(), *rest]
    finally:
        proc.terminate()
        proc.wait()


def summary(name: str, ttft: list[float], after_first: bool) -> float:
    # Arriving together, "user 1" is whoever was served first; after-first, the one who came first.
    user1, rest = (ttft[0], ttft[1:]) if after_first else (min(ttft), sorted(ttft)[1:])
    p50 = statistics.median(rest)
    print(
        f"{name:16s} user 1 {user1:6.2f} s   users 2-8 p50 {p50:6.2f} s, max "
        f"{max(rest):6.2f} s   p50/user 1 {p50 / user1:4.2f}"
    )
    return p50


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--predict", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arrival", choices=("together", "after-first", "both"), default="both")
    args = ap.parse_args(argv)
    model = real_model.gemma_270m()
    print(f"model {model.name}, 8 users, {args.threads} threads, load {os.getloadavg()[0]:.2f}")
    for arrival in ("together", "after-first") if args.arrival == "both" else (args.arrival,):
        print(f"\narrival: {arrival}")
        one_pattern(args, model, arrival == "after-first")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


def one_pattern(args: argparse.Namespace, model: Path, after_first: bool) -> None:
    results: dict[bool, tuple[list[float], list[str]]] = {}
    for share in (True, False):
        opts = LoadOptions(
            n_ctx=2048,
            n_parallel=8,
            n_batch=512,
            n_ubatch=512,
            n_threads=args.threads,
            share_prefix=share,
        )
        with Engine([str(model)], opts) as engine:
            system = system_prompt(engine, args.tokens)
            results[share] = ours(engine, system, args.predict, after_first)
    on = summary("ours, sharing", results[True][0], after_first)
    off = summary("ours, no sharing", results[False][0], after_first)
    print(
        f"same replies: {results[True][1] == results[False][1]}   "
        f"p50 sharing / no sharing {on / off:4.2f}"
    )
    anchor = theirs(model, system, args.predict, args.threads, after_first)
    if anchor is not None:
        server = summary("llama-server", anchor, after_first)
        print(f"ours (sharing) p50 / llama-server p50 {on / server:4.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
