"""What ggml RPC costs: the same model local vs split over RPC workers (``localllm worker``).

Measures prefill tok/s (pp512) and single-stream decode tok/s (tg128) of our
engine in-process, once with every layer on the local CPU and once with the
layers split evenly over the workers (all offloaded, llama.cpp's layer split),
interleaving the two round by round and taking medians.  Prints split ÷ local.

With the default two workers on 127.0.0.1 (started here, each serving its CPU)
the ratio shows the protocol's own overhead (serialisation, a round trip per
graph, copies between processes), not a network's; there is no goal for it on
one machine.  ``--workers host:port,...`` measures workers you started
elsewhere.  Run on a quiet machine:

  .venv/bin/python bench/rpc_bench.py                  # 0.5B Q4_K_M, 2 loopback workers
  .venv/bin/python bench/rpc_bench.py --quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_bench  # sibling script: run_requests, rand_prompt
import gen_models

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_workers(n: int, threads: int) -> tuple[list[str], list[subprocess.Popen[bytes]]]:
    from localllm.hardware.rpc import query

    eps, procs = [], []
    for _ in range(n):
        port = free_port()
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "localllm",
                    "worker",
                    "--port",
                    str(port),
                    "--threads",
                    str(threads),
                ],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        eps.append(f"127.0.0.1:{port}")
    deadline = time.monotonic() + 60
    for ep in eps:
        while not query(ep, timeout=1.0).ready:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"worker {ep} did not start (is the RPC plugin built? "
                    "localllm backends build rpc)"
                )
            time.sleep(0.2)
    return eps, procs


def make(model: Path, threads: int, workers: list[str]):  # -> Engine
    from localllm.engine.engine import Engine
    from localllm.runner.messages import LoadOptions

    split = {}
    if workers:
        split = dict(
            n_gpu_layers=999,
            devices=[f"RPC[{w}]" for w in workers],
            tensor_split=[1.0] * len(workers),
            rpc_workers=workers,
        )
    opts = LoadOptions(
        n_ctx=1024,
        n_parallel=1,
        n_batch=512,
        n_ubatch=512,
        n_threads=threads,
        flash_attn="auto",
        kv_type="f16",
        **split,
    )
    return Engine([str(model)], opts)


def measure(eng, pp: int, tg: int) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s) on the wall clock, after a short warm-up."""
    engine_bench.run_requests(eng, [engine_bench.rand_prompt(16)], 4, True)
    t_sub, [(ptimes, _)] = engine_bench.run_requests(eng, [engine_bench.rand_prompt(pp)], 1, True)
    _, [(gtimes, _)] = engine_bench.run_requests(eng, [engine_bench.rand_prompt(1)], tg, True)
    return pp / (ptimes[0] - t_sub), (len(gtimes) - 1) / (gtimes[-1] - gtimes[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="0.5b-q4_k_m", help="gen_models size-quant")
    ap.add_argument("--workers", default="", help="host:port,... (default: start 2 here)")
    ap.add_argument("--threads", type=int, default=engine_bench.physical_cores())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round, pp128/tg32")
    args = ap.parse_args(argv)
    size, quant = args.model.split("-", 1)
    model = gen_models.ensure(size, quant)
    pp, tg = (128, 32) if args.quick else (512, 128)
    rounds = 1 if args.quick else args.rounds
    procs: list[subprocess.Popen[bytes]] = []
    workers = [w for w in args.workers.split(",") if w]
    if not workers:
        workers, procs = start_workers(2, args.threads)
    load = os.getloadavg()
    results: dict[str, list[tuple[float, float]]] = {"local": [], "split": []}
    try:
        for rnd in range(rounds):
            for kind in ("local", "split") if rnd % 2 == 0 else ("split", "local"):
                with make(model, args.threads, workers if kind == "split" else []) as eng:
                    results[kind].append(measure(eng, pp, tg))
                print(
                    f"round {rnd + 1} {kind}: prefill {results[kind][-1][0]:.1f} tok/s, "
                    f"decode {results[kind][-1][1]:.1f} tok/s",
                    flush=True,
                )
    finally:
        for p in procs:
            p.kill()
            p.wait()
    med = {
        k: (statistics.median(v[0] for v in r), statistics.median(v[1] for v in r))
        for k, r in results.items()
    }
    print(
        f"\n{model.name}, {args.threads} threads, {len(workers)} workers "
        f"({', '.join(workers)}), {rounds} rounds, load average before "
        f"{load[0]:.2f} / after {os.getloadavg()[0]:.2f}"
    )
    print(f"{'':10}{'local':>12}{'split':>12}{'ratio':>8}")
    for i, what in enumerate((f"pp{pp}", f"tg{tg}")):
        lo, sp = med["local"][i], med["split"][i]
        print(f"{what:10}{lo:>12.1f}{sp:>12.1f}{sp / lo:>7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
