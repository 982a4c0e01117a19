"""Vision benchmark: time to encode one image; projector memory, estimated vs allocated.

Generates (once, cached outside the repo) the tiny text model, the tiny test
projector and a SigLIP-400M-shaped projector (tests/support/visionmodel.py: 27 blocks of
width 1152, 448-pixel images in 14-pixel patches = 1024 image tokens, f16 random
weights, ~0.8 GiB; ``--layers`` makes it shallower), loads each next to the tiny
text model in one engine, encodes a solid image ``--runs`` times and prints:
load time, encode time (best and median of the runs), the whole image request's
prompt time, and the planner's projector estimate (``scheduler/projector.py``)
against what libmtmd logged allocating.  Weights' values do not change the time.

    .venv/bin/python bench/vision_bench.py [--layers 27] [--runs 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localllm.engine.engine import Engine  # noqa: E402
from localllm.runner.messages import (  # noqa: E402
    MEDIA_MARKER,
    CompletionRequest,
    Done,
    LoadOptions,
    SamplingParams,
)
from localllm.scheduler.estimate import fmt_bytes  # noqa: E402
from localllm.scheduler.projector import projector_cost  # noqa: E402
from tests.support.tinymodel import make_tiny_model  # noqa: E402
from tests.support.visionmodel import RED, make_projector, png  # noqa: E402

CACHE = Path("/tmp/localllm-vision-bench")  # outside the repo: the big projector is ~0.8 GiB


def files(layers: int) -> tuple[Path, Path, Path]:
    text = CACHE / "tiny.gguf"
    if not text.exists():
        make_tiny_model(CACHE)
    tiny = CACHE / "mmproj-tiny.gguf"
    if not tiny.exists():
        make_projector(CACHE, name=tiny.name)
    big = CACHE / f"mmproj-siglip400m-{layers}l.gguf"
    if not big.exists():
        t0 = time.perf_counter()
        make_projector(CACHE, realistic=True, n_layer=layers, name=big.name)
        print(
            f"generated {big.name} ({fmt_bytes(big.stat().st_size)}) in "
            f"{time.perf_counter() - t0:.0f} s"
        )
    return text, tiny, big


def bench(label: str, text: Path, proj: Path, runs: int, threads: int) -> None:
    cost = projector_cost(proj)
    t0 = time.perf_counter()
    opts = LoadOptions(
        n_ctx=2048, n_batch=512, n_ubatch=512, n_threads=threads, projector=str(proj)
    )
    with Engine([str(text)], opts) as e:
        load_s = time.perf_counter() - t0
        assert e.projector is not None
        mem = e.projector.memory()
        img = png(640, 480, RED)
        _, media = e.projector.tokenize(MEDIA_MARKER, [img], True, True)
        span = media.spans[0]
        times = []
        for _ in range(runs):
            t1 = time.perf_counter()
            e.projector.encode(media, span)
            times.append(time.perf_counter() - t1)
        req = CompletionRequest(
            id="r",
            prompt=MEDIA_MARKER,
            images=[img],
            num_predict=1,
            sampling=SamplingParams(temperature=0.0),
        )
        e.submit(req)
        done = None
        while e.has_work():
            for ev in e.step():
                if isinstance(ev, Done):
                    done = ev
        assert done is not None
    allocated = sum(d["model"] + d["compute"] for d in mem.values())
    print(
        f"{label}: {proj.name}: {span.n} image tokens; load {load_s:.2f} s; encode best "
        f"{min(times) * 1000:.1f} ms, median {statistics.median(times) * 1000:.1f} ms "
        f"({runs} runs, {threads} threads); whole image prefill "
        f"{done.prompt_eval_ns / 1e6:.1f} ms"
    )
    print(
        f"  memory: planner estimate {fmt_bytes(cost.total)} (weights "
        f"{fmt_bytes(cost.weights)} + compute {fmt_bytes(cost.compute)}); libmtmd "
        f"allocated {fmt_bytes(allocated)} {mem}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    from localllm.hardware.cpu import default_threads

    threads = args.threads or default_threads()
    text, tiny, big = files(args.layers)
    bench("tiny", text, tiny, args.runs, threads)
    bench("siglip-400m-shaped", text, big, args.runs, threads)


if __name__ == "__main__":
    main()
