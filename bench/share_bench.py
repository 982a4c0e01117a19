"""Shared system prompts: time to first token of 8 users arriving together, sharing on and off.

Eight requests open with the same ~1,000-token system prompt and end with
different questions; they are submitted to one engine at once (8 slots, the
runner's batch settings, greedy), and each one's time to first token is taken
from the submission.  With prefix sharing (engine/sharing.py) one slot
evaluates the system prompt and the others take its cells over as it grows;
without it every slot evaluates the prompt itself.  Printed: user 1's TTFT, the
p50 and max of users 2..8, the ratio p50 / user 1 (goal <= 0.2), whether the
replies are the same both ways, and the ratio of the sharing run's p50 to the
run without it.  The anchor is llama-server with the same 8 slots and prompts
(``build_llama_tools.sh``), whose slots reuse only their own cache.

Run (on a quiet machine):  .venv/bin/python bench/share_bench.py [--rounds 2]
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
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling scripts, not a package: hence the sys.path line
import real_model

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, LoadOptions, Piece, SamplingParams

RULES = ("You are the support assistant of a bicycle shop. Answer in two sentences at most. "
         "Mention prices in euros, never promise delivery dates, and suggest visiting the "
         "workshop for anything involving brakes, forks or wheels. ")
QUESTIONS = ["How much is a new chain?", "Do you sell helmets?", "Can you fix a flat tyre?",
             "What are your opening hours?", "Is the workshop open on Sunday?",
             "Do you rent bikes?", "How long does a service take?", "Can I pay by card?"]
SERVER = gen_models.cache_dir() / "llama-tools" / "bin" / "llama-server"


def system_prompt(engine: Engine, tokens: int) -> str:
    text = ""
    while len(engine.tokenize(text)) < tokens:
        text += RULES
    return text


def ours(engine: Engine, system: str, n_predict: int) -> tuple[list[float], list[str]]:
    start = time.perf_counter()
    ids = [f"u{i}-{time.monotonic_ns()}" for i in range(len(QUESTIONS))]
    for rid, q in zip(ids, QUESTIONS, strict=True):
        engine.submit(CompletionRequest(id=rid, prompt=system + "\nQuestion: " + q + "\nAnswer:",
                                        num_predict=n_predict,
                                        sampling=SamplingParams(temperature=0.0)))
    first: dict[str, float] = {}
    texts = dict.fromkeys(ids, "")
    while engine.has_work():
        for ev in engine.step():
            if isinstance(ev, Piece):
                first.setdefault(ev.id, time.perf_counter() - start)
                texts[ev.id] += ev.text
    return [first[i] for i in ids], [texts[i] for i in ids]


def theirs(model: Path, system: str, n_predict: int, threads: int) -> list[float] | None:
    if not SERVER.exists():
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(SERVER), "-m", str(model), "--port", str(port), "-np", "8",
                             "-c", str(8 * 2048), "-t", str(threads), "-b", "512", "-ub", "512"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)

        def one(q: str) -> float:
            body = json.dumps({"prompt": system + "\nQuestion: " + q + "\nAnswer:",
                               "n_predict": n_predict, "temperature": 0, "stream": True,
                               "cache_prompt": True}).encode()
            t0 = time.perf_counter()
            r = urllib.request.urlopen(urllib.request.Request(
                url + "/completion", data=body, headers={"Content-Type": "application/json"}))
            for line in r:
                if line.startswith(b"data: ") and json.loads(line[6:]).get("content"):
                    ttft = time.perf_counter() - t0
                    r.read()
                    return ttft
            return time.perf_counter() - t0

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            return list(pool.map(one, QUESTIONS))
    finally:
        proc.terminate()
        proc.wait()


def summary(name: str, ttft: list[float]) -> float:
    rest = sorted(ttft)[1:]
    p50 = statistics.median(rest)
    print(f"{name:16s} user 1 {min(ttft):6.2f} s   users 2-8 p50 {p50:6.2f} s, max "
          f"{max(rest):6.2f} s   p50/user 1 {p50 / min(ttft):4.2f}")
    return p50


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--predict", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    model = real_model.gemma_270m()
    print(f"model {model.name}, 8 users, {args.threads} threads, load {os.getloadavg()[0]:.2f}")
    results: dict[bool, tuple[list[float], list[str]]] = {}
    for share in (True, False):
        opts = LoadOptions(n_ctx=2048, n_parallel=8, n_batch=512, n_ubatch=512,
                           n_threads=args.threads, share_prefix=share)
        with Engine([str(model)], opts) as engine:
            system = system_prompt(engine, args.tokens)
            results[share] = ours(engine, system, args.predict)
    on = summary("ours, sharing", results[True][0])
    off = summary("ours, no sharing", results[False][0])
    print(f"same replies: {results[True][1] == results[False][1]}   "
          f"p50 sharing / no sharing {on / off:4.2f}")
    anchor = theirs(model, system, args.predict, args.threads)
    if anchor is not None:
        server = summary("llama-server", anchor)
        print(f"ours (sharing) p50 / llama-server p50 {on / server:4.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
