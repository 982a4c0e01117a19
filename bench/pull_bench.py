"""Pull throughput on loopback: our downloader vs ``huggingface_hub.hf_hub_download``.

Serves a ~200 MB generated GGUF from the Hub stand-in (``tests/support/hubstub.py``) on
127.0.0.1 and times, on the same file and server, ``localllm.store.pull.pull_model``
(stream + sha256 while writing + verify + manifest) against
``hf_hub_download`` (stream, no sha256 check).  Prints MB/s for both and the
ratio.  Run: ``.venv/bin/python bench/pull_bench.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub

REPO = "bench/Big-GGUF"
FILE = "Big-F16.gguf"
# 6 layers of 1024-wide F16 weights: about 200 MB.
SHAPE = Shape(n_layers=6, n_embd=1024, n_head=16, n_head_kv=16, n_ff=4096, n_vocab=1000)


def _ours(tmp: Path) -> float:
    from localllm.store.local import Store
    from localllm.store.names import parse_name
    from localllm.store.pull import pull_model

    root = tmp / "models"
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    pull_model(Store(root), parse_name(f"hf.co/{REPO}:F16"), lambda event: None)
    return time.perf_counter() - start


def _hf(tmp: Path, endpoint: str) -> float:
    from huggingface_hub import hf_hub_download

    cache = tmp / "hf-cache"
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    hf_hub_download(REPO, FILE, cache_dir=cache, endpoint=endpoint)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        stub = HubStub(tmp / "hub").start()
        os.environ["HF_ENDPOINT"] = stub.url
        src = write_gguf(tmp / "big.gguf", SHAPE, "F16")
        size = src.stat().st_size
        stub.add_file(REPO, FILE, src)
        ours, theirs = [], []
        for _ in range(args.runs):  # interleaved, so both see the same machine state
            ours.append(_ours(tmp))
            theirs.append(_hf(tmp, stub.url))
        stub.stop()
    mb = size / 1e6
    best_ours, best_hf = mb / min(ours), mb / min(theirs)
    print(f"file: {mb:.1f} MB over loopback, best of {args.runs} runs")
    print(f"localllm pull_model     : {best_ours:8.1f} MB/s  (sha256 verified)")
    print(f"huggingface_hub download: {best_hf:8.1f} MB/s  (not verified)")
    print(f"ratio ours/hf           : {best_ours / best_hf:8.2f}")


if __name__ == "__main__":
    main()
