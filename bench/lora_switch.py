"""LoRA hot-swap cost against a full model load, on a bench model (or the tiny one).

Writes a random rank-``--rank`` LoRA for the model (``attn_q`` and ``attn_v`` of
every block, the usual fine-tuning targets) with the ``gguf`` package, then
measures, in-process on ``localllm.engine``:

  * full load: ``Engine(...)`` (model + context), what a reload costs in the
    runner child (the daemon adds a process spawn on top, also measured:
    ``RunnerProcess.start`` to ``loaded``);
  * adapter load: reading the LoRA file into the loaded model, once per file;
  * switch: a 1-token decode right after changing the applied adapter set,
    minus the same decode without a change (llama.cpp rebuilds its graph for
    the next decode after a switch; that is the cost a mixed batch pays).

Medians over ``--rounds``.  Run:
  .venv/bin/python bench/lora_switch.py                       # 0.5B Q4_K_M if present
  .venv/bin/python bench/lora_switch.py --model /path/x.gguf --rank 16
  .venv/bin/python bench/lora_switch.py --tiny                # the test model
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localllm.engine.engine import Engine  # noqa: E402
from localllm.runner.messages import LoadOptions  # noqa: E402

DEFAULT = Path.home() / ".cache/localllm-bench/models/llama-0.5b-q4_k_m.gguf"


def write_lora(model: Path, out: Path, rank: int, targets: tuple[str, ...], seed: int = 0) -> int:
    """A random LoRA over ``targets`` of ``model``; returns the number of tensor pairs."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(model))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(out), arch)
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))
    pairs = 0
    for t in reader.tensors:
        if not t.name.endswith(targets):
            continue
        n_in, n_out = (int(d) for d in t.shape[:2])  # ggml order
        w.add_tensor(t.name + ".lora_a", rng.normal(0, 0.01, (rank, n_in)).astype(np.float32))
        w.add_tensor(t.name + ".lora_b", rng.normal(0, 0.01, (n_out, rank)).astype(np.float32))
        pairs += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return pairs


def ms(ns: float) -> str:
    return f"{ns / 1e6:8.2f} ms"


def one_token_decode(eng: Engine) -> int:
    eng.ctx.seq_rm(0, -1, -1)
    eng.batch.clear()
    eng.batch.add(eng.model.bos if eng.model.bos >= 0 else 0, 0, 0, True)
    t0 = time.perf_counter_ns()
    rc = eng.ctx.decode(eng.batch)
    dt = time.perf_counter_ns() - t0
    assert rc == 0, rc
    return dt


async def runner_load(model: Path, opts: LoadOptions) -> int:
    from localllm.runner.process import RunnerProcess

    t0 = time.perf_counter_ns()
    runner = await RunnerProcess.start([str(model)], opts)
    dt = time.perf_counter_ns() - t0
    await runner.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=DEFAULT)
    ap.add_argument("--tiny", action="store_true", help="use the tiny test model")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=2048)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lora-bench-"))
    model: Path = args.model
    targets: tuple[str, ...] = ("attn_q.weight", "attn_v.weight")
    if args.tiny or not model.exists():
        from tests.support.tinymodel import make_tiny_model

        model = make_tiny_model(work)
        targets = ("attn_q.weight", "attn_v.weight", "output.weight")
    loras = [work / "a.gguf", work / "b.gguf"]
    pairs = [write_lora(model, p, args.rank, targets, seed=i) for i, p in enumerate(loras)]
    opts = LoadOptions(n_ctx=args.n_ctx, n_parallel=1, n_threads=args.threads)
    print(
        f"model {model.name} ({model.stat().st_size / 2**20:.0f} MiB), LoRA rank "
        f"{args.rank} on {pairs[0]} tensors ({loras[0].stat().st_size / 2**20:.1f} MiB), "
        f"{args.threads} threads, n_ctx {args.n_ctx}"
    )

    loads: list[int] = []
    for _ in range(max(3, args.rounds // 3)):
        t0 = time.perf_counter_ns()
        Engine([str(model)], opts).close()
        loads.append(time.perf_counter_ns() - t0)
    spawn = [asyncio.run(runner_load(model, opts)) for _ in range(3)]

    with Engine([str(model)], opts) as eng:
        t0 = time.perf_counter_ns()
        keys = [eng.adapters.resolve([str(p)]) for p in loras]
        adapter_load = (time.perf_counter_ns() - t0) / len(loras)
        for key in ((), *keys):  # warm every graph once
            eng.adapters.apply(key)
            one_token_decode(eng)
        steady: list[int] = []
        switched: list[int] = []
        sets = [(), keys[0], keys[1]]
        for i in range(args.rounds):
            # The set of the previous switched decode again: no change, no graph rebuild.
            eng.adapters.apply(sets[i % 3])
            steady.append(one_token_decode(eng))
            eng.adapters.apply(sets[(i + 1) % 3])
            switched.append(one_token_decode(eng))
    load, switch = statistics.median(loads), statistics.median(switched)
    base = statistics.median(steady)
    extra = max(0.0, switch - base)
    print(f"full load (Engine: model + context) {ms(load)}")
    print(f"full load (runner process spawn)    {ms(statistics.median(spawn))}")
    print(f"adapter first load (once per file)  {ms(adapter_load)}")
    # Medians and minimums: on a shared machine the minimum is the least disturbed.
    print(f"1-token decode, same set            {ms(base)}  (min {ms(min(steady)).strip()})")
    print(
        f"1-token decode right after a switch {ms(switch)}  (min {ms(min(switched)).strip()}"
        f"; switch adds {ms(extra).strip()} median, "
        f"{ms(max(0, min(switched) - min(steady))).strip()} by minimums)"
    )
    print(
        f"switch vs engine load: {extra / load:.4f}x; "
        f"vs runner load: {extra / statistics.median(spawn):.4f}x"
    )


if __name__ == "__main__":
    main()
