"""Two cores through the daemon: this checkout's against another checkout's, round by round.

Made for issue 38: the portable core (the CPU backend as llama.cpp's per-ISA variants,
of which ggml loads the best) against a core built with ``GGML_NATIVE`` for this
machine.  Both daemons run from their own checkout (``PYTHONPATH``), each with its own
store holding the same GGUF, the daemon's default settings and --threads; in each round
both get the same kind of request (``/api/generate``, a raw prompt of --prompt-tokens,
then --output-tokens greedy, ``stream: false``), in swapped order every round, so that
drifting load hits both.  Printed: the daemon's prefill and decode rates (its own
timings), medians, the ratio this/other and the range of single rounds' ratios; each
core's ``system_info`` (the instruction sets it was built or loaded with); lscpu's
model and flags; the load average.

  # the other checkout: a worktree whose localllm/_core and _native hold a native core
  .venv/bin/python bench/core_variants_bench.py --other /tmp/native-tree
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import daemon_bench
import gen_models  # sibling scripts, not a package: hence the sys.path line
import gpu_check_measure as gcm
import server_bench
from server_bench import REPO

from localllm.loadtest.protocols import Target
from localllm.loadtest.users import make_client

ROWS = (("prefill", "prefill tok/s (daemon timings)"), ("decode", "decode tok/s (daemon timings)"))


def system_info(tree: Path) -> str:
    """The CPU backend's features as that checkout's core reports them (after loading it)."""
    code = "from localllm.engine import binding; print(binding.system_info())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout.strip() or out.stderr.strip()[-300:]


async def measure(args: argparse.Namespace, urls: dict[str, str]) -> list[dict[str, Any]]:
    targets = {
        k: Target(u, args.name, api="ollama", mode="completion", options={"temperature": 0})
        for k, u in urls.items()
    }
    salt = random.randrange(10**9)
    async with AsyncExitStack() as stack:
        http = {
            k: await stack.enter_async_context(make_client(t, 1, 1800)) for k, t in targets.items()
        }
        # The prompt's length in words, found on one daemon (same model, same tokenizer);
        # the first request to each loads its model.
        n_words, prompt = await daemon_bench.calibrate(
            http["this"], targets["this"], args.prompt_tokens, salt
        )
        await daemon_bench.calibrate(http["other"], targets["other"], args.prompt_tokens, salt)
        print(f"prompt: {n_words} words = {prompt} tokens", flush=True)
        rounds: list[dict[str, Any]] = []
        tag = salt + 1000
        for rnd in range(args.rounds):
            got: dict[str, Any] = {"load": os.getloadavg()[0]}
            order = ["this", "other"] if rnd % 2 == 0 else ["other", "this"]
            for which in order:
                vals = []
                for _ in range(args.reps):
                    tag += 1
                    vals.append(
                        await daemon_bench.ours(
                            http[which],
                            targets[which],
                            gcm.make_prompt(n_words, tag),
                            args.output_tokens,
                            False,
                        )
                    )
                got[which] = {k: statistics.median(v[k] for v in vals) for k, _ in ROWS}
            rounds.append(got)
            print(
                f"round {rnd + 1}/{args.rounds}: prefill {got['this']['prefill']:.1f} vs "
                f"{got['other']['prefill']:.1f}, decode {got['this']['decode']:.1f} vs "
                f"{got['other']['decode']:.1f}; load {got['load']:.2f}",
                flush=True,
            )
    return rounds


def report(args: argparse.Namespace, gguf: Path, rounds: list[dict[str, Any]]) -> list[str]:
    cpu = daemon_bench.machine()
    lines = [
        f"model {gguf.name}, {args.threads} threads, {args.prompt_tokens}-token prompt then "
        f"{args.output_tokens} tokens, greedy, {args.rounds} rounds x {args.reps}; "
        f"this: {REPO} ({daemon_bench.commit()}); other: {args.other}",
        f"cpu: {cpu['model']}, {os.cpu_count()} CPUs; flags: {cpu['flags']}",
        f"this core: {args.info_this}",
        f"other core: {args.info_other}",
        "",
        "| metric | this | other | ratio this/other | single rounds |",
        "|---|---|---|---|---|",
    ]
    for key, label in ROWS:
        a = [r["this"][key] for r in rounds]
        b = [r["other"][key] for r in rounds]
        per = [x / y for x, y in zip(a, b, strict=True)]
        lines.append(
            f"| {label} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | "
            f"{statistics.median(a) / statistics.median(b):.3f}x | "
            f"{min(per):.2f}-{max(per):.2f} |"
        )
    loads = [r["load"] for r in rounds]
    lines.append(f"load average during the rounds: {min(loads):.2f}-{max(loads):.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", type=Path, required=True, help="the other checkout")
    ap.add_argument("--model", default="0.5b-q4_k_m", help="<size>-<quant> or a GGUF path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args(argv)
    gguf = gen_models.resolve(args.model)
    args.name = "bench-variants"
    args.info_this, args.info_other = system_info(REPO), system_info(args.other.resolve())
    settings = {"LOCALLLM_NUM_THREAD": str(args.threads), "LOCALLLM_KEEP_ALIVE": "-1"}
    logs = gen_models.cache_dir() / "variants-bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        for which, tree in (("this", REPO), ("other", args.other.resolve())):
            home = gen_models.cache_dir() / f"variants-bench-home-{which}"
            server_bench.import_model(home, args.name, gguf)
            cmd, env, url = server_bench.daemon(home, settings)
            env["PYTHONPATH"] = str(tree)
            stack.enter_context(server_bench.serving(cmd, env, url, "/", logs / f"{which}.log"))
            urls[which] = url
        rounds = asyncio.run(measure(args, urls))
    print("\n" + "\n".join(report(args, gguf, rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
