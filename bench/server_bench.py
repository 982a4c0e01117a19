"""Server latency and throughput against llama-server, same GGUF, threads and context.

Starts our daemon (``python -m localllm serve``, the model imported into a
private LOCALLLM_HOME under the bench cache) and llama.cpp's ``llama-server``
side by side, then for 1, 4, 8 and 16 concurrent streams measures, with the
load-test library behind ``localllm bench`` (``localllm.loadtest``):
  * TTFT p50/p95 and inter-token latency p50/p95,
  * aggregate output tokens/s,
each of ours printed as a ratio to llama-server.  Ours and theirs alternate
level by level (and swap order every round), so a change in machine load hits
both.  Prompts are sent raw (completion mode: no chat template, identical
tokens for both) and decoding is greedy; the generated models never emit EOS,
so every request produces exactly ``--output-tokens`` tokens.

Then prefix reuse: a two-turn chat where turn 1 is a ~1,500-token message and
turn 2 resends it as history plus a short question; turn-2 TTFT as a fraction
of turn-1 TTFT (1.0 = the history was evaluated again).

Goals (issue 4): throughput >= 1.0x, p95 TTFT <= 1.1x at every level, turn-2
TTFT <= 0.15x of turn 1.  Needs bench/build_llama_tools.sh and gen_models.py.
  nice .venv/bin/python bench/server_bench.py                 # 0.5b-q4_k_m, 2 rounds
  nice .venv/bin/python bench/server_bench.py --quick         # 1 round, fewer requests
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling script, not a package: hence the sys.path line

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from localllm.api._httpx import httpx  # noqa: E402
from localllm.loadtest.protocols import Target  # noqa: E402
from localllm.loadtest.stats import LevelSummary  # noqa: E402
from localllm.loadtest.users import PromptMaker, Workload, make_client, run_level, send_one  # noqa: E402

TOOLS = gen_models.cache_dir() / "llama-tools" / "bin"
MODEL_NAME = "bench"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, proc: subprocess.Popen[bytes], path: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url + path, timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not come up")


@contextmanager
def serving(
    cmd: list[str], env: dict[str, str], url: str, health: str, log: Path
) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_up(url, proc, health)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# Imports the GGUF unless the store already holds a model of that name whose blob
# has the GGUF's size (a size check: a switched --model is imported again, a
# regenerated one of the same shape need not be, its speed is the same).
_IMPORT = """
import sys
from pathlib import Path
from localllm import paths
from tests.support.models import import_gguf
from localllm.store.local import Store
from localllm.store.names import parse_name

store, name, gguf = Store(paths.models()), parse_name(sys.argv[1]), Path(sys.argv[2])
try:
    same = store.model_path(store.get(name)).stat().st_size == gguf.stat().st_size
except Exception:  # not imported yet, or its blob is gone
    same = False
if not same or sys.argv[3] == "force":
    import_gguf(store, name, [gguf])
"""


def import_model(home: Path, name: str, gguf: Path, force: bool = False) -> None:
    """Put ``gguf`` into the store under ``home`` as ``name`` (a blob copy, kept for later runs)."""
    env = {**os.environ, "LOCALLLM_HOME": str(home), "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, "-c", _IMPORT, name, str(gguf), "force" if force else ""],
        env=env,
        check=True,
    )


def daemon(home: Path, settings: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """``localllm serve`` from this checkout on a free port: command, environment, URL."""
    port = free_port()
    env = {
        **os.environ,
        "LOCALLLM_HOME": str(home),
        "PYTHONPATH": str(REPO),
        "LOCALLLM_HOST": f"127.0.0.1:{port}",
        **settings,
    }
    return [sys.executable, "-m", "localllm", "serve"], env, f"http://127.0.0.1:{port}"


def ours(args: argparse.Namespace, gguf: Path) -> tuple[list[str], dict[str, str], str]:
    home = gen_models.cache_dir() / "server-bench-home"
    import_model(home, MODEL_NAME, gguf, args.reimport)
    return daemon(
        home,
        {
            "LOCALLLM_NUM_PARALLEL": str(args.parallel),
            "LOCALLLM_NUM_THREAD": str(args.threads),
            "LOCALLLM_CONTEXT_LENGTH": str(args.ctx),
            "LOCALLLM_KEEP_ALIVE": "-1",
        },
    )


def theirs(args: argparse.Namespace, gguf: Path) -> tuple[list[str], dict[str, str], str]:
    port = free_port()
    # -c is the whole unified KV pool in llama-server; ours is per slot.
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
        str(args.parallel),
        "-c",
        str(args.ctx * args.parallel),
        "-kvu",
        "--no-webui",
        "-a",
        MODEL_NAME,
        "-ngl",
        str(args.ngl),
    ]
    return cmd, dict(os.environ), f"http://127.0.0.1:{port}"


def median(values: list[float]) -> float:
    clean = [v for v in values if v == v]
    return statistics.median(clean) if clean else float("nan")


async def concurrency_table(
    args: argparse.Namespace, targets: dict[str, Target]
) -> dict[tuple[str, int], list[LevelSummary]]:
    res: dict[tuple[str, int], list[LevelSummary]] = {}
    prompts = {side: PromptMaker(args.prompt_tokens, seed=i) for i, side in enumerate(targets)}
    for rnd in range(args.rounds):
        for i, c in enumerate(args.levels):
            order = list(targets) if (rnd + i) % 2 == 0 else list(targets)[::-1]
            for side in order:
                wl = Workload(
                    args.prompt_tokens,
                    args.output_tokens,
                    requests=max(args.min_requests, args.per_user * c),
                )
                summary, _ = await run_level(targets[side], wl, c, prompts=prompts[side])
                res.setdefault((side, c), []).append(summary)
                print(
                    f"  round {rnd + 1} {side:6} {c:2} streams: {summary.ok}/{summary.requests}"
                    f" ok, TTFT p95 {summary.ttft.p95 * 1000:.0f} ms, "
                    f"{summary.output_tok_s:.1f} tok/s",
                    flush=True,
                )
    return res


async def prefix_reuse(args: argparse.Namespace, target: Target) -> tuple[float, float, int]:
    """Median turn-1 TTFT, turn-2 TTFT and history tokens over a few fresh conversations."""
    t1s, t2s, hist = [], [], []
    pm = PromptMaker(args.history_tokens, seed=7)
    async with make_client(target, 1, 600) as http:
        # Learn this tokenizer's tokens per word from a short probe: a long one
        # could be truncated to fit the context and then under-count.
        probe = PromptMaker(256, seed=8).make()
        calib = await send_one(http, target, probe, 1)
        if calib.prompt_tokens:
            pm.tokens_per_word = calib.prompt_tokens / len(probe.split())
        for _ in range(args.conversations):
            history = [{"role": "user", "content": pm.make()}]
            one = await send_one(http, target, history, 16)
            history.append({"role": "assistant", "content": one.text})
            history.append({"role": "user", "content": "And in one word?"})
            two = await send_one(http, target, history, 16)
            if one.status != "ok" or two.status != "ok":
                raise RuntimeError(f"chat failed: {one.error or two.error}")
            if not one.prompt_tokens or abs(one.prompt_tokens / args.history_tokens - 1) > 0.2:
                print(
                    f"  warning: turn 1 of {target.url} counted {one.prompt_tokens} prompt "
                    f"tokens, not ~{args.history_tokens} (truncated to fit the context?)"
                )
            t1s.append(one.ttft or float("nan"))
            t2s.append(two.ttft or float("nan"))
            hist.append(one.prompt_tokens or 0)
    return median(t1s), median(t2s), int(median([float(h) for h in hist]))


def metric(s: LevelSummary, key: str) -> float:
    """One table cell's figure: latencies in milliseconds, throughput in tokens/s."""
    return {
        "ttft50": s.ttft.p50 * 1000,
        "ttft95": s.ttft.p95 * 1000,
        "itl50": s.itl.p50 * 1000,
        "itl95": s.itl.p95 * 1000,
        "toks": s.output_tok_s,
    }[key]


def report(
    args: argparse.Namespace,
    res: dict[tuple[str, int], list[LevelSummary]],
    chats: dict[str, tuple[float, float, int]],
) -> None:
    load = os.getloadavg()
    print(
        f"\nmodel {args.model}, {args.threads} threads, {args.ngl} GPU layers for llama-server, "
        f"{args.parallel} slots x {args.ctx} ctx, "
        f"~{args.prompt_tokens} prompt + {args.output_tokens} output tokens, "
        f"{args.rounds} round(s); load average {load[0]:.1f}/{load[1]:.1f} on {os.cpu_count()} "
        "CPUs (shared machine: noisy)"
    )
    head = (
        f"{'streams':>7} | {'TTFT p50 ms':>18} | {'TTFT p95 ms':>18} | {'ITL p50 ms':>18} | "
        f"{'ITL p95 ms':>18} | {'agg tok/s':>18}"
    )
    print(head + "\n" + "-" * len(head))
    worst: dict[str, float] = {}
    for c in args.levels:
        cells = []
        for key in ("ttft50", "ttft95", "itl50", "itl95", "toks"):
            o = median([metric(s, key) for s in res[("ours", c)]])
            t = median([metric(s, key) for s in res[("theirs", c)]])
            ratio = o / t if t else float("nan")
            if key == "ttft95":
                worst[key] = max(worst.get(key, ratio), ratio)
            elif key == "toks":
                worst[key] = min(worst.get(key, ratio), ratio)
            cells.append(f"{o:6.1f}/{t:6.1f} {ratio:4.2f}x")
        errs = sum(s.errors + s.lost for side in ("ours", "theirs") for s in res[(side, c)])
        print(f"{c:>7} | " + " | ".join(cells) + (f"  ({errs} errors)" if errs else ""))
    print("cells: ours/llama-server and the ratio ours/theirs (medians over rounds)")
    print(
        f"goals: agg tok/s >= 1.0x at every level (worst {worst.get('toks', 0):.2f}x), "
        f"p95 TTFT <= 1.1x (worst {worst.get('ttft95', 0):.2f}x)"
    )
    for side, (t1, t2, hist) in chats.items():
        print(
            f"prefix reuse {side:6}: turn 1 TTFT {t1 * 1000:.0f} ms ({hist} prompt tokens), "
            f"turn 2 {t2 * 1000:.0f} ms = {t2 / t1:.3f}x of turn 1 (goal <= 0.15x)"
        )


async def run(args: argparse.Namespace, urls: dict[str, str]) -> None:
    targets = {
        "ours": Target(
            urls["ours"],
            MODEL_NAME,
            api=args.our_api,
            mode="completion",
            options={"temperature": 0},
        ),
        "theirs": Target(
            urls["theirs"], MODEL_NAME, api="openai", mode="completion", options={"temperature": 0}
        ),
    }
    for t in targets.values():  # load the model, touch every code path once
        async with make_client(t, 1, 600) as http:
            warm = await send_one(http, t, "warm up", 4)
        if warm.status != "ok":
            raise RuntimeError(f"warm-up failed at {t.url}: {warm.error}")
    res = await concurrency_table(args, targets)
    chats = {}
    for side, t in targets.items():
        if args.conversations < 1:
            break  # --conversations 0: the stream table only
        chat = Target(t.url, t.model, api=t.api, mode="chat", options=t.options)
        chats[side] = await prefix_reuse(args, chat)
    report(args, res, chats)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="0.5b-q4_k_m", help="<size>-<quant> from gen_models.py")
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--parallel", type=int, default=16, help="slots on both servers")
    p.add_argument("--ctx", type=int, default=2048, help="context per slot")
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 8, 16])
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, help="tokens per answer (64; 32 with --quick)")
    p.add_argument("--per-user", type=int, default=3, help="requests per stream per level")
    p.add_argument("--min-requests", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--history-tokens", type=int, default=1500)
    p.add_argument("--conversations", type=int, default=3)
    p.add_argument(
        "--ngl",
        type=int,
        default=0,
        help="llama-server's -ngl (99 on a GPU); ours places layers itself",
    )
    p.add_argument("--our-api", choices=("ollama", "openai"), default="ollama")
    p.add_argument("--quick", action="store_true", help="1 round, 2 requests per stream")
    p.add_argument("--reimport", action="store_true", help="import the GGUF into our store again")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.per_user, args.min_requests, args.conversations = 1, 2, 4, 2
    if args.output_tokens is None:
        args.output_tokens = 32 if args.quick else 64
    size, quant = args.model.split("-", 1)
    gguf = gen_models.model_path(size, quant)
    if not gguf.exists():
        sys.exit(f"{gguf} missing: run bench/gen_models.py --model {size} --quant {quant}")
    if not (TOOLS / "llama-server").exists():
        sys.exit("llama-server missing: run bench/build_llama_tools.sh")
    logs = gen_models.cache_dir() / "server-bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    (c1, e1, u1), (c2, e2, u2) = ours(args, gguf), theirs(args, gguf)
    with (
        serving(c1, e1, u1, "/", logs / "ours.log"),
        serving(c2, e2, u2, "/health", logs / "llama-server.log"),
    ):
        print(f"ours at {u1}, llama-server at {u2}; logs in {logs}", flush=True)
        asyncio.run(run(args, {"ours": u1, "theirs": u2}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
