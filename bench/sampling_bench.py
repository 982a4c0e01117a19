"""Sampling on the host against sampling on the device: the cost of an engine step.

Two engines on the same GGUF, in one process: one samples on the host
(``device_sampling="off"``: every output row's logits copied out of the decode,
then sampled by the shim) and one inside the decode (``"on"``: only the token
comes back, see localllm/engine/device_sampling.py).  For each sampler chain
(greedy, Ollama's default top-k 40 / top-p 0.9 / temperature 0.8) and each
number of concurrent streams, rounds alternate which engine goes first, and
over the steps where every stream decodes one token (no prompt, no drafts):

  step      wall time of ``Engine.step()`` (what the runner waits for)
  decode    inside ``llama_decode`` (the graph; on the device side it samples too)
  host      step - decode: Python, reading the token(s), sampling on the host
  tok/s     streams / step

Medians; the last columns are device / host.  On the CPU backend "the device"
is the CPU too, so this measures what the in-graph path costs there; on a GPU
(``--ngl 99``) it measures what the copy and the host pass cost.

Run (quiet machine; models come from gen_models.py, F16 where quantized models
crash this VM's AMX kernels):
  .venv/bin/python bench/sampling_bench.py --model 0.5b-f16            # ~4 minutes on 2 cores
  .venv/bin/python bench/sampling_bench.py --quick                     # smoke run, ~30 s
  .venv/bin/python bench/sampling_bench.py --model 1b-q4_k_m --ngl 99  # GPU, ~1 minute
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling script, not a package: hence the sys.path line

TOKEN_LO, TOKEN_HI = 400, 20000  # ordinary tokens in any vocab we bench
CHAINS = {"greedy": {"temperature": 0.0}, "ollama": {"temperature": 0.8, "top_k": 40, "top_p": 0.9}}


@dataclass
class Steps:
    wall: list[float] = field(default_factory=list)  # ms per full decoding step
    decode: list[float] = field(default_factory=list)

    def med(self, what: str) -> float:
        xs = getattr(self, what)
        return statistics.median(xs) if xs else float("nan")


def make_engine(model: Path, mode: str, a: argparse.Namespace) -> Any:
    from localllm.engine.engine import Engine
    from localllm.runner.messages import LoadOptions

    opts = LoadOptions(
        n_ctx=a.prompt + a.tokens + 64,
        n_parallel=max(a.parallel),
        n_batch=512,
        n_ubatch=512,
        n_threads=a.threads,
        n_gpu_layers=a.ngl,
        device_sampling=mode,
        prompt_cache=0,
    )
    eng = Engine([str(model)], opts)
    timed: list[float] = []
    decode = eng.ctx.decode

    def timed_decode(batch: Any) -> int:
        t = time.perf_counter_ns()
        rc = decode(batch)
        timed.append((time.perf_counter_ns() - t) / 1e6)
        return rc

    eng.ctx.decode = timed_decode  # the engine calls it through the instance
    eng.decode_ms = timed
    return eng


def run(eng: Any, k: int, chain: dict[str, float], a: argparse.Namespace, out: Steps) -> None:
    """k streams at once; record the steps in which all k decode one token each."""
    from localllm.runner.messages import CompletionRequest, Failed, SamplingParams

    hi = min(TOKEN_HI, eng.model.n_vocab)  # a tiny test model's vocabulary is smaller
    for i in range(k):
        prompt = [random.randrange(min(TOKEN_LO, hi // 2), hi) for _ in range(a.prompt)]
        eng.submit(
            CompletionRequest(
                id=f"r{i}", prompt=prompt, num_predict=a.tokens, sampling=SamplingParams(**chain)
            )
        )  # type: ignore[arg-type]
    while eng.has_work():
        eng.decode_ms.clear()
        t = time.perf_counter_ns()
        events = eng.step()
        wall = (time.perf_counter_ns() - t) / 1e6
        if any(isinstance(e, Failed) for e in events):
            raise SystemExit(f"a request failed: {events}")
        busy = sum(1 for s in eng.slots if s.active is not None and not s.active.prefilling)
        if len(eng.decode_ms) == 1 and len(eng.batch) == k and busy == k:
            out.wall.append(wall)
            out.decode.append(eng.decode_ms[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", default="0.5b-f16", help="<size>-<quant> from gen_models or a GGUF path"
    )
    ap.add_argument("--ngl", type=int, default=0, help="layers on the GPU (99: all)")
    ap.add_argument("--threads", type=int, default=0, help="0 = physical cores")
    ap.add_argument("--parallel", default="1,4,16", help="concurrent stream counts")
    ap.add_argument("--chains", default="greedy,ollama")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64, help="tokens each stream generates")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens per stream")
    ap.add_argument("--quick", action="store_true", help="1 round, 16 tokens, 1 and 4 streams")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.tokens, a.parallel = 1, 16, "1,4"
    a.parallel = [int(x) for x in a.parallel.split(",")]
    if not a.threads:
        from localllm.hardware.cpu import cpu_info

        a.threads = max(1, int(cpu_info().physical_cores))
    model = gen_models.resolve(a.model)
    load0 = os.getloadavg()
    engines = {mode: make_engine(model, mode, a) for mode in ("off", "on")}
    assert not engines["off"].chains.on and engines["on"].chains.on
    res: dict[tuple[str, int, str], Steps] = {}
    for eng in engines.values():  # warm-up: weights paged in, graphs planned
        run(eng, 1, CHAINS["greedy"], a, Steps())
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}", flush=True)
        for name in a.chains.split(","):
            for k in a.parallel:
                order = ("off", "on") if r % 2 == 0 else ("on", "off")
                for mode in order:
                    run(engines[mode], k, CHAINS[name], a, res.setdefault((name, k, mode), Steps()))
    load1 = os.getloadavg()
    for eng in engines.values():
        eng.close()
    print(
        f"\nmodel {model.name}, ngl {a.ngl}, threads {a.threads}, {a.rounds} rounds, "
        f"{a.tokens} tokens/stream; {platform.processor() or platform.machine()}; "
        f"load {load0[0]:.2f} -> {load1[0]:.2f}"
    )
    head = (
        f"{'chain':8} {'k':>3} | {'step ms':>15} | {'decode ms':>15} | {'host ms':>13} | "
        f"{'tok/s':>15} | dev/host"
    )
    print(head + "\n" + "-" * len(head))
    for name in a.chains.split(","):
        for k in a.parallel:
            h, d = res[(name, k, "off")], res[(name, k, "on")]
            hs, ds = h.med("wall"), d.med("wall")
            hh, dh = hs - h.med("decode"), ds - d.med("decode")
            print(
                f"{name:8} {k:>3} | {hs:7.2f} {ds:7.2f} | {h.med('decode'):7.2f} "
                f"{d.med('decode'):7.2f} | {hh:6.2f} {dh:6.2f} | {k * 1e3 / hs:7.1f} "
                f"{k * 1e3 / ds:7.1f} | {hs / ds:.3f}x  (steps {len(h.wall)}/{len(d.wall)})"
            )
    print("columns: host sampling, then device sampling; dev/host > 1: device is faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
