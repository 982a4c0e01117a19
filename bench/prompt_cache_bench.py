"""A prompt cache that survives: an agent's long system prompt, a daemon restart, the prefix again.

Each round, through the real daemon (``localllm serve`` from this checkout, one
slot, its own LOCALLLM_HOME in the bench cache, the model loaded before each
timed request so no load is timed):
  1. cold: a ``--prefix-tokens`` system prompt (opening with a word of its own,
     so nothing earlier is reused) and a first question, streamed, temperature
     0; then wait until the runner's writes to disk are done (no temp file left
     and the set of copies unchanged for 0.5 s: there may be two, one at the end
     of the shared head and one at the end of the prompt);
  2. the daemon is stopped and started again (a new runner: only the disk cache
     is left), and the model loaded;
  3. warm, ``--warm continue``: the cold conversation and a second question, as
     an agent's next turn sends its history; ``--warm branch``: the same system
     prompt and another question, a new conversation (a new session of an agent
     after a restart).
``--api chat`` (the default for ``branch``) sends ``/api/chat`` with a system
message (the prefix) and a user message, so the daemon finds from the chat
template where the shared head (the system prompt) ends and keeps a copy there:
a new conversation reuses it, on sliding-window models (Gemma 3) too.  With
``continue`` the cold request there makes 8 tokens and the warm one sends them
back as the assistant's reply before the second question.  ``--api generate``
(the default for ``continue``) sends raw ``/api/generate`` text (the prefix,
``\\n`` and the question, one token): no chat structure, so no head is known,
and a sliding-window model takes back only a copy its prompt continues whole
(the rule of engine/park.py): a raw ``branch`` on one is a full prefill again.
Printed: client TTFT (request sent to the first streamed line) cold and warm, the
daemon's ``prompt_cached_count`` and ``prompt_eval_duration`` (the last streamed
line), and warm / cold.  Goal: warm <= 0.1x cold for ``continue`` (issue 30 §3),
<= 0.25x for ``branch`` (issue 35 §2); else exit 3.

The anchor is llama-server from the same source, which has no automatic cache
that outlives it, only a manual one: ``--slot-save-path`` and a client that
saves slot 0 after the cold request and restores it after the restart (the
restore's time is added to its warm TTFT).  It is sent raw ``/completion`` text
with either ``--api``, the same concatenation as ``generate`` (it has no
restore that knows a chat's structure).  Ours and theirs swap order every
round.  Load averages before and after are printed: compare only quiet runs.

Models: ``tiny-attn`` (the tests' tiny model with attention, 1 layer: the
figures say what reading a file costs against an almost free prefill; with
``--api chat`` it carries the tests' chat template), a
gen_models spec (``0.5b-f16``) or a GGUF path (Gemma 3 270M Q4_K_M: pass
``--cpu-repack off`` on a machine whose AMX kernels crash).
  .venv/bin/python bench/prompt_cache_bench.py                          # tiny-attn, ~2 min
  .venv/bin/python bench/prompt_cache_bench.py --cpu-repack off \\
      --model ~/.cache/localllm-bench/models/gemma-3-270m-q4_k_m.gguf   # ~5 min on 2 cores
  .venv/bin/python bench/prompt_cache_bench.py --warm branch   # a new conversation, /api/chat
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

GOAL = {"continue": 0.1, "branch": 0.25}  # issue 30 §3, issue 35 §2
REPLY_TOKENS = 8  # the cold reply that ``continue`` with ``--api chat`` sends back
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


def model_path(spec: str, chat: bool) -> Path:
    if spec != "tiny-attn":
        return gen_models.resolve(spec)
    sys.path.insert(0, str(REPO))
    from tests.support.tinymodel import CHAT_TEMPLATE, make_tiny_model

    # Chat: the tests' template ("role:content." each), so a system message is a head of
    # its own; raw: none, as before (the weights are the same).
    folder = gen_models.cache_dir() / "models" / ("tiny-attn-chat" if chat else "tiny-attn")
    path = folder / "tiny.gguf"
    return (
        path
        if path.exists()
        else make_tiny_model(
            folder,
            attention=True,
            n_ctx_train=32768,
            chat_template=CHAT_TEMPLATE if chat else None,
        )
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


def first_line(url: str, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any], str]:
    """Seconds to the first streamed line, the last line as JSON, and the reply's text
    (``/api/chat``'s ``message.content`` across the lines; empty for the others)."""
    t0 = time.perf_counter()
    ttft, last, reply = float("nan"), "", []
    with httpx.stream("POST", url + path, json=body, timeout=1200, trust_env=False) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.strip() or line.startswith(":"):
                continue
            if ttft != ttft:
                ttft = time.perf_counter() - t0
            last = line
            if path == "/api/chat" and line.startswith("{"):
                reply.append(str(json.loads(line).get("message", {}).get("content", "")))
    text = last.removeprefix("data: ")
    return ttft, (json.loads(text) if text.startswith("{") else {}), "".join(reply)


# One token: the slot then holds exactly the prompt (the token sampled last is never
# evaluated), so a continuing prompt continues the saved copy whole.
def generate(url: str, prompt: str) -> tuple[float, dict[str, Any]]:
    ttft, done, _ = first_line(
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
    return ttft, done


def chat(
    url: str, messages: list[dict[str, str]], num_predict: int = 1
) -> tuple[float, dict[str, Any], str]:
    return first_line(
        url,
        "/api/chat",
        {
            "model": NAME,
            "messages": messages,
            "stream": True,
            "options": {"temperature": 0, "num_predict": num_predict},
        },
    )


def complete(url: str, prompt: str) -> tuple[float, dict[str, Any]]:
    ttft, done, _ = first_line(
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
    return ttft, done


def prompts(args: argparse.Namespace, prefix: str) -> tuple[str, str]:
    """The raw texts (``--api generate`` and llama-server with either ``--api``)."""
    cold = prefix + "\nfirst question?"
    return cold, (cold if args.warm == "continue" else prefix) + "\nsecond question?"


def conversation(prefix: str, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": prefix}, {"role": "user", "content": question}]


STABLE_S = 0.5


def wait_written(folder: Path, after: float, timeout: float = 600) -> float:
    """Seconds from ``after`` to the last copy the runner wrote, once its writes are done:
    at least one copy written since ``after``, no temp file (a write under way), and the
    set of copies (name, size, mtime) unchanged for ``STABLE_S`` (a prompt may make two:
    one at the end of the shared head, one at the end of the prompt)."""
    deadline = time.monotonic() + timeout
    seen: frozenset[tuple[str, int, float]] = frozenset()
    since = time.monotonic()
    while time.monotonic() < deadline:
        files = set()
        for p in folder.rglob("*.llpc"):
            try:
                st = p.stat()
            except FileNotFoundError:  # evicted or replaced between the listing and now
                continue
            files.add((str(p), st.st_size, st.st_mtime))
        now = frozenset(files)
        if now != seen:
            seen, since = now, time.monotonic()
        new = [m for _, _, m in seen if m >= after]
        busy = any(folder.rglob(".*.tmp"))
        if new and not busy and time.monotonic() - since >= STABLE_S:
            return max(new) - after
        time.sleep(0.05)
    raise TimeoutError(f"nothing was written under {folder} (or the writes never settled)")


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
        if args.api == "generate":
            cold, cold_done = generate(url, first)
        else:
            messages = conversation(prefix, "first question?")
            if args.warm == "continue":  # the next turn sends the reply back
                cold, cold_done, reply = chat(url, messages, REPLY_TOKENS)
                later = [
                    *messages,
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": "second question?"},
                ]
            else:  # a new conversation: the same system prompt, another question
                cold, cold_done, _ = chat(url, messages)
                later = conversation(prefix, "second question?")
        written = wait_written(folder, t0)
    t1 = time.monotonic()
    with ours(args, home) as url:
        restart = time.monotonic() - t1
        if args.api == "generate":
            warm, warm_done = generate(url, second)
        else:
            warm, warm_done, _ = chat(url, later)
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
    goal = GOAL[args.warm]
    print(
        f"\nprompt cache across a restart: {args.model}, ~{args.prefix_tokens}-token prefix, "
        f"warm {args.warm}, api {args.api}, {args.threads} threads, {args.rounds} rounds; "
        f"load {load[0]} -> {load[1]}"
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
        f"goal <= {goal}x: {'ok' if ratio <= goal else 'MISSED'}"
    )
    if res.get("theirs"):
        print(
            "  llama-server: raw /completion text (no chat template), no automatic cache: "
            "the client saves slot 0 and restores it by hand"
        )
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
    return 0 if ratio <= goal else 3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-attn")
    p.add_argument("--prefix-tokens", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cpu-repack", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--warm", choices=("continue", "branch"), default="continue")
    p.add_argument(
        "--api",
        choices=("generate", "chat"),
        default=None,
        help="ours: raw /api/generate text, or /api/chat with a system message "
        "(default: chat for --warm branch, generate for continue)",
    )
    p.add_argument("--no-llama-server", action="store_true")
    args = p.parse_args(argv)
    if args.api is None:
        args.api = "chat" if args.warm == "branch" else "generate"
    args.ctx = args.prefix_tokens + 512
    gguf = model_path(args.model, args.api == "chat")
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
