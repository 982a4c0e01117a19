"""A prompt cache that survives: an agent's long system prompt, a daemon restart, the prefix again.

Each round, through the real daemon (``localllm serve`` from this checkout, one
slot, its own LOCALLLM_HOME in the bench cache, the model loaded before each
timed request so no load is timed):
  1. cold: a raw ``/api/generate`` (stream, one token) of a ``--prefix-tokens``
     system prompt (opening with a word of its own, so nothing earlier is
     reused) and a question; then wait until the runner has written it to disk;
  2. the daemon is stopped and started again (a new runner: only the disk cache
     is left), and the model loaded;
  3. warm, ``--warm continue`` (the default): the cold prompt and a second
     question, as an agent's next turn sends its history; ``--warm branch``: the
     system prompt and another question, a new conversation.  A sliding-window
     model (Gemma 3) takes back only a copy its prompt continues whole (the
     rule of engine/park.py), so on one ``branch`` is a full prefill again.
Printed: client TTFT (request sent to the first streamed line) cold and warm, the
daemon's ``prompt_cached_count`` and ``prompt_eval_duration``, and warm / cold.
Goal (issue 30 §3): warm <= 0.1x cold (else exit 3).

The anchor is llama-server from the same source, which has no automatic cache
that outlives it, only a manual one: ``--slot-save-path`` and a client that
saves slot 0 after the cold request and restores it after the restart (the
restore's time is added to its warm TTFT).  Ours and theirs swap order every
round.  Load averages before and after are printed: compare only quiet runs.

Models: ``tiny-attn`` (the tests' tiny model with attention, 1 layer: the
figures say what reading a file costs against an almost free prefill), a
gen_models spec (``0.5b-f16``) or a GGUF path (Gemma 3 270M Q4_K_M: pass
``--cpu-repack off`` on a machine whose AMX kernels crash).
  .venv/bin/python bench/prompt_cache_bench.py                          # tiny-attn, ~2 min
  .venv/bin/python bench/prompt_cache_bench.py --cpu-repack off \\
      --model ~/.cache/localllm-bench/models/gemma-3-270m-q4_k_m.gguf   # ~5 min on 2 cores
  .venv/bin/python bench/prompt_cache_bench.py --prefix-tokens 512 --rounds 1  # smoke, ~30 s
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling scripts, not a package: hence the sys.path line
import server_bench
from server_bench import REPO, TOOLS

from localllm.api._httpx import httpx

GOAL = 0.1
NAME = "bench"
WORDS = (
    "tool",
    "call",
    "file",
    "read",
    "write",
    "search",
    "answer",
    "user",
    "code",
    "test",
    "plan",
    "step",
    "check",
    "result",
    "error",
    "retry",
    "note",
    "keep",
    "short",
    "clear",
)


def model_path(spec: str) -> Path:
    if spec != "tiny-attn":
        return gen_models.resolve(spec)
    sys.path.insert(0, str(REPO))
    from tests.support.tinymodel import make_tiny_model

    folder = gen_models.cache_dir() / "models" / "tiny-attn"
    path = folder / "tiny.gguf"
    return (
        path
        if path.exists()
        else make_tiny_model(folder, attention=True, n_ctx_train=32768, chat_template=None)
    )


def body_text(n_words: int, seed: int = 0) -> str:
    """Sentences of lower-case words (every vocabulary has them, the tiny model's too)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(n_words)]
    return ". ".join(" ".join(words[i : i + 12]) for i in range(0, n_words, 12)) + "."


@contextmanager
def ours(args: argparse.Namespace, home: Path) -> Iterator[str]:
    cmd, env, url = server_bench.daemon(
        home,
        {
            "LOCALLLM_NUM_PARALLEL": "1",
            "LOCALLLM_NUM_THREAD": str(args.threads),
            "LOCALLLM_CONTEXT_LENGTH": str(args.ctx),
            "LOCALLLM_KEEP_ALIVE": "-1",
            "LOCALLLM_CPU_REPACK": args.cpu_repack,
        },
    )
    env.pop("LOCALLLM_CACHE", None)  # the prompt cache goes under the bench's home
    with server_bench.serving(cmd, env, url, "/", home / "daemon.log"):
        load = httpx.post(url + "/api/generate", json={"model": NAME}, timeout=600, trust_env=False)
        load.raise_for_status()
        yield url


@contextmanager
def theirs(args: argparse.Namespace, gguf: Path, slots: Path) -> Iterator[str]:
    port = server_bench.free_port()
    cmd = [
        str(TOOLS / "llama-server"),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(args.threads),
        "-np",
        "1",
        "-c",
        str(args.ctx),
        "--no-webui",
        "-a",
        NAME,
        "--slot-save-path",
        str(slots),
    ]
    if args.cpu_repack == "off":
        cmd.append("--no-repack")
    url = f"http://127.0.0.1:{port}"
    with server_bench.serving(cmd, dict(os.environ), url, "/health", slots / "server.log"):
        yield url


def first_line(url: str, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Seconds to the first streamed line, and the last line as JSON."""
    t0 = time.perf_counter()
    ttft, last = float("nan"), ""
    with httpx.stream("POST", url + path, json=body, timeout=1200, trust_env=False) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.strip() or line.startswith(":"):
                continue
            if ttft != ttft:
                ttft = time.perf_counter() - t0
            last = line
    text = last.removeprefix("data: ")
    return ttft, (json.loads(text) if text.startswith("{") else {})


# One token: the slot then holds exactly the prompt (the token sampled last is never
# evaluated), so a continuing prompt continues the saved copy whole.
def generate(url: str, prompt: str) -> tuple[float, dict[str, Any]]:
    return first_line(
        url,
        "/api/generate",
        {
            "model": NAME,
            "prompt": prompt,
            "raw": True,
            "stream": True,
            "options": {"temperature": 0, "num_predict": 1},
        },
    )


def complete(url: str, prompt: str) -> tuple[float, dict[str, Any]]:
    return first_line(
        url,
        "/completion",
        {
            "prompt": prompt,
            "n_predict": 1,
            "temperature": 0,
            "stream": True,
            "id_slot": 0,
            "cache_prompt": True,
        },
    )


def prompts(args: argparse.Namespace, prefix: str) -> tuple[str, str]:
    cold = prefix + "\nfirst question?"
    return cold, (cold if args.warm == "continue" else prefix) + "\nsecond question?"


def wait_written(folder: Path, after: float, timeout: float = 600) -> float:
    """Seconds until the runner has written a prompt to disk after ``after`` (and no write
    is under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [p for p in folder.glob("*/*.llpc") if p.stat().st_mtime >= after]
        if done and not list(folder.glob("*/.*.tmp")):
            return time.time() - after
        time.sleep(0.05)
    raise TimeoutError(f"nothing was written under {folder}")


def calibrate(url: str, n: int) -> str:
    """Text of exactly ``n`` tokens of this model (cut where the tokenizer says)."""
    text = body_text(n)
    tokens = httpx.post(
        url + "/api/tokenize", json={"model": NAME, "text": text}, timeout=600, trust_env=False
    ).json()["tokens"]
    if len(tokens) < n:
        raise SystemExit(f"the body text makes only {len(tokens)} tokens")
    return str(
        httpx.post(
            url + "/api/detokenize",
            json={"model": NAME, "tokens": tokens[:n]},
            timeout=600,
            trust_env=False,
        ).json()["text"]
    )


def run_ours(args: argparse.Namespace, home: Path, prefix: str) -> dict[str, float]:
    folder = home / "cache" / "prompts"
    first, second = prompts(args, prefix)
    with ours(args, home) as url:
        t0 = time.time()
        cold, cold_done = generate(url, first)
        written = wait_written(folder, t0)
    t1 = time.monotonic()
    with ours(args, home) as url:
        restart = time.monotonic() - t1
        warm, warm_done = generate(url, second)
    return {
        "cold": cold,
        "warm": warm,
        "tokens": cold_done.get("prompt_eval_count", 0),
        "cached_cold": cold_done.get("prompt_cached_count", 0),
        "cached": warm_done.get("prompt_cached_count", 0),
        "eval_cold": cold_done.get("prompt_eval_duration", 0) / 1e9,
        "eval_warm": warm_done.get("prompt_eval_duration", 0) / 1e9,
        "written": written,
        "restart": restart,
    }


def run_theirs(args: argparse.Namespace, gguf: Path, slots: Path, prefix: str) -> dict[str, float]:
    save = {"filename": "bench.bin"}
    first, second = prompts(args, prefix)
    with theirs(args, gguf, slots) as url:
        cold, _ = complete(url, first)
        t0 = time.perf_counter()
        httpx.post(
            url + "/slots/0?action=save", json=save, timeout=600, trust_env=False
        ).raise_for_status()
        saved = time.perf_counter() - t0
    with theirs(args, gguf, slots) as url:
        t0 = time.perf_counter()
        r = httpx.post(url + "/slots/0?action=restore", json=save, timeout=600, trust_env=False)
        r.raise_for_status()
        restore = time.perf_counter() - t0
        warm, done = complete(url, second)
    return {
        "cold": cold,
        "warm": warm + restore,
        "restore": restore,
        "saved": saved,
        "cached": float(done.get("tokens_cached", 0) or r.json().get("n_restored", 0)),
    }


def report(
    args: argparse.Namespace, res: dict[str, list[dict[str, float]]], load: tuple[Any, Any]
) -> int:
    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in res[side])

    o = res["ours"]
    print(
        f"\nprompt cache across a restart: {args.model}, ~{args.prefix_tokens}-token prefix, "
        f"warm {args.warm}, {args.threads} threads, {args.rounds} rounds; load "
        f"{load[0]} -> {load[1]}"
    )
    print(
        f"  ours: prompt {med('ours', 'tokens'):.0f} tokens, {med('ours', 'cached'):.0f} "
        f"cached after the restart (cold: {med('ours', 'cached_cold'):.0f})"
    )
    print(
        f"  ours: TTFT cold {med('ours', 'cold') * 1000:.0f} ms (prefill "
        f"{med('ours', 'eval_cold') * 1000:.0f} ms), warm {med('ours', 'warm') * 1000:.0f} ms "
        f"(prefill {med('ours', 'eval_warm') * 1000:.0f} ms); written to disk "
        f"{med('ours', 'written'):.2f} s after the request; restart + load "
        f"{med('ours', 'restart'):.1f} s"
    )
    ratios = [r["warm"] / r["cold"] for r in o]
    ratio = statistics.median(ratios)
    print(
        f"  ours: warm / cold TTFT {ratio:.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f}), "
        f"goal <= {GOAL}x: {'ok' if ratio <= GOAL else 'MISSED'}"
    )
    if res.get("theirs"):
        print(
            f"  llama-server: TTFT cold {med('theirs', 'cold') * 1000:.0f} ms, warm after a "
            f"manual restore {med('theirs', 'warm') * 1000:.0f} ms (restore "
            f"{med('theirs', 'restore') * 1000:.0f} ms), {med('theirs', 'cached'):.0f} cached"
        )
        print(
            f"  ours / llama-server: cold {med('ours', 'cold') / med('theirs', 'cold'):.2f}x, "
            f"warm {med('ours', 'warm') / med('theirs', 'warm'):.2f}x (theirs needs the "
            f"client to save and restore)"
        )
    return 0 if ratio <= GOAL else 3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-attn")
    p.add_argument("--prefix-tokens", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cpu-repack", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--warm", choices=("continue", "branch"), default="continue")
    p.add_argument("--no-llama-server", action="store_true")
    args = p.parse_args(argv)
    args.ctx = args.prefix_tokens + 512
    gguf = model_path(args.model)
    home = gen_models.cache_dir() / "prompt-cache-bench-home"
    slots = gen_models.cache_dir() / "prompt-cache-bench-slots"
    shutil.rmtree(home / "cache", ignore_errors=True)  # no prompt of an earlier run
    slots.mkdir(parents=True, exist_ok=True)
    server_bench.import_model(home, NAME, gguf, force=True)
    with ours(args, home) as url:
        body = calibrate(url, args.prefix_tokens)
    load_before = os.getloadavg()
    res: dict[str, list[dict[str, float]]] = {"ours": [], "theirs": []}
    for rnd in range(args.rounds):
        prefix = f"session {random.randrange(16**8):08x}. " + body
        sides = ["ours"] if args.no_llama_server else ["ours", "theirs"]
        for side in sides if rnd % 2 == 0 else sides[::-1]:
            shutil.rmtree(home / "cache", ignore_errors=True)
            r = (
                run_ours(args, home, prefix)
                if side == "ours"
                else run_theirs(args, gguf, slots, prefix)
            )
            res[side].append(r)
            print(
                f"  round {rnd + 1} {side:6}: TTFT cold {r['cold'] * 1000:.0f} ms, warm "
                f"{r['warm'] * 1000:.0f} ms, {r['cached']:.0f} cached",
                flush=True,
            )

    def fmt(avg: tuple[float, float, float]) -> str:
        return "/".join(f"{x:.1f}" for x in avg)

    return report(args, res, (fmt(load_before), fmt(os.getloadavg())))


if __name__ == "__main__":
    raise SystemExit(main())
