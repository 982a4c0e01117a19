"""Prompt-lookup speculation: decode speed with it on and off, against llama.cpp's llama-lookup.

Two prompts on the real Gemma 3 270M (base, Q4_K_M; ``real_model.py`` fetches it):
  * copy-heavy: a block of code, then the start of the same block again, so a
    base model goes on copying (what code edits, summaries and RAG answers do);
  * free-form: a story opening with nothing to copy (what speculation must not slow);
    a small base model soon repeats itself, though, which drafts do catch;
  * counting: numbers in words, where ", " recurs but what follows it never does, so
    most drafts are wrong: the cost of speculating when it does not pay.
Our engine runs in-process with the runner's settings (one slot, 4096 context,
n_batch 512, greedy); "off" and "ngram" alternate round by round and the medians
of decode tok/s (generated tokens over wall time from the first token) are
printed, with the ratio on/off, the accepted/drafted counts, and a check that
both give the same text.  The anchor is llama.cpp's own prompt-lookup tool,
``llama-lookup``, built from the same sources (``build_llama_tools.sh``), on the
same prompt, threads and draft size: its decode speed against ours with ngram.

Run (on a quiet machine):
  .venv/bin/python bench/spec_bench.py [--rounds 3] [--tokens 192] [--draft 8]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling scripts, not a package: hence the sys.path line
import real_model

from localllm.engine.engine import Engine
from localllm.engine.slots import cut
from localllm.runner.messages import CompletionRequest, Done, LoadOptions, Piece, SamplingParams

CODE = '''def parse_line(line):
    """Split a CSV line into fields, honouring double quotes."""
    fields, current, quoted = [], [], False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        elif ch == ',' and not quoted:
            fields.append(''.join(current))
            current = []
        else:
            current.append(ch)
    fields.append(''.join(current))
    return fields


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\\n")
            if not line or line.startswith("#"):
                continue
            rows.append((number, parse_line(line)))
    return rows
'''
COPY = CODE + "\n\n# The same module again, unchanged:\n\ndef parse_line(line):\n"
FREE = "Once upon a time, in a small fishing village on a windy northern coast, there lived"
# Continuations that never repeat a stretch but keep repeating ", ": drafts mostly wrong.
COUNT = "Counting in words: one, two, three, four, five, six, seven,"
LOOKUP = gen_models.cache_dir() / "llama-tools" / "bin" / "llama-lookup"


def run_ours(engine: Engine, prompt: str, tokens: int, draft: int) -> tuple[str, float, Done]:
    return decode(engine, CompletionRequest(
        id=f"r{time.monotonic_ns()}", prompt=prompt, num_predict=tokens,
        sampling=SamplingParams(temperature=0.0), draft_tokens=draft))


def decode(engine: Engine, req: CompletionRequest) -> tuple[str, float, Done]:
    """Run ``req`` alone: its text, decode tok/s and Done (draft_bench.py uses it too)."""
    # From an empty cache each time: a reused prefix was computed in other batch shapes,
    # whose last-bit differences can flip a near-tie late in a greedy run, which would
    # hide whether speculation itself keeps the text.
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
    # Tokens after the first over the time after the first: decode speed alone.
    return text, (done.eval_count - 1) / (end - first), done


def run_lookup(model: Path, prompt: str, tokens: int, draft: int,
               threads: int) -> tuple[float, str] | None:
    if not LOOKUP.exists():
        return None
    out = subprocess.run([str(LOOKUP), "-m", str(model), "-p", prompt, "-n", str(tokens),
                          "--spec-draft-n-max", str(draft), "-t", str(threads), "-c", "4096",
                          "--temp", "0"],
                         capture_output=True, text=True, timeout=600, check=False)
    log = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    drafted = re.search(r"n_drafted\s+=\s+(\d+)", log)
    accepted = re.search(r"n_accept\s+=\s+(\d+)", log)
    if not m:
        return None
    return float(m.group(3)), (f"{accepted.group(1) if accepted else '?'}/"
                               f"{drafted.group(1) if drafted else '?'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--draft", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    model = real_model.gemma_270m()
    opts = LoadOptions(n_ctx=4096, n_parallel=1, n_batch=512, n_ubatch=512,
                       n_threads=args.threads)
    print(f"model {model.name}, {args.threads} threads, {args.tokens} tokens, "
          f"draft {args.draft}, load {os.getloadavg()[0]:.2f}")
    with Engine([str(model)], opts) as engine:
        for name, prompt in (("copy-heavy", COPY), ("free-form", FREE), ("counting", COUNT)):
            speeds: dict[str, list[float]] = {"off": [], "ngram": []}
            texts: dict[str, str] = {}
            last: Done | None = None
            theirs: list[float] = []
            their_accept = ""
            for _ in range(args.rounds):
                for mode, draft in (("off", 0), ("ngram", args.draft)):
                    text, speed, done = run_ours(engine, prompt, args.tokens, draft)
                    speeds[mode].append(speed)
                    texts[mode] = text
                    if draft:
                        last = done
                lookup = run_lookup(model, prompt, args.tokens, args.draft, args.threads)
                if lookup is not None:
                    theirs.append(lookup[0])
                    their_accept = lookup[1]
            off, on = statistics.median(speeds["off"]), statistics.median(speeds["ngram"])
            assert last is not None
            print(f"{name:11s} off {off:6.1f} tok/s   ngram {on:6.1f} tok/s   "
                  f"on/off {on / off:4.2f}x   accepted {last.accepted}/{last.drafted}   "
                  f"same text: {texts['off'] == texts['ngram']}")
            if theirs:
                anchor = statistics.median(theirs)
                print(f"{'':11s} llama-lookup {anchor:6.1f} tok/s   accepted {their_accept}   "
                      f"ours(ngram)/theirs {on / anchor:4.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
