"""Rerank throughput (pairs/s): the daemon's ``/v1/rerank`` against ``llama-server --reranking``.

Both serve the same generated reranker GGUF with the same threads, slots and
batch: a ``qwen3`` model with rank pooling, the ``yes``/``no`` classifier head and
Qwen3-Reranker's pair template in ``tokenizer.chat_template.rerank`` (random
weights: speed depends on shapes, not values), written on first use under the
bench cache.  Shapes: ``0.6b`` (Qwen3-Reranker-0.6B: 28 layers, embd 1024, 16
heads, 8 kv heads, ffn 3072, a 151,669-token vocabulary) and ``tiny`` (the
tests' one-layer reranker, for a smoke run).

Each round sends ``--requests`` rerank requests of one query and ``--docs``
documents of about ``--doc-words`` words, ``--clients`` at a time, to ours and
then to theirs (the order swaps every round, so drifting load hits both), and
times them on the client's clock.  Printed: pairs/s of each per round, the
medians, their ratio and the range of single rounds' ratios; and, once, whether
both gave the same scores for the same pairs (ours with ``raw_scores``: the
head's output, which is what llama-server returns), which checks that the two
lay the pairs out alike.

Needs bench/build_llama_tools.sh (llama-server).
  .venv/bin/python bench/rerank_bench.py                         # 0.6b f16, 5 rounds
  .venv/bin/python bench/rerank_bench.py --shape tiny --rounds 1 --requests 2  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling scripts, not a package: hence the sys.path line
import server_bench
from server_bench import REPO, TOOLS

from localllm.api._httpx import httpx

QWEN3_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
    'Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
    "<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant "
    "passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
# (layers, embd, heads, kv heads, ffn, vocab)
SHAPES = {"0.6b": (28, 1024, 16, 8, 3072, 151669)}
WORDS = (
    "the",
    "model",
    "query",
    "answer",
    "river",
    "capital",
    "engine",
    "paris",
    "light",
    "battery",
    "protein",
    "market",
    "planet",
    "storm",
    "garden",
    "signal",
    "number",
)


def write_reranker(out: Path, shape: tuple[int, ...], seed: int = 0) -> None:
    """A random-weight F16 qwen3 reranker (see the module doc), streamed tensor by tensor."""
    import gguf

    n_layer, n_embd, n_head, n_kv, n_ff, n_vocab = shape
    hd = n_embd // n_head
    w = gguf.GGUFWriter(str(out), "qwen3")
    w.add_name("localllm-bench random qwen3 reranker")
    w.add_context_length(40960)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_classifier_output_labels(["yes", "no"])
    tokens, scores, types = gen_models.build_vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template([{"name": "rerank", "template": QWEN3_TEMPLATE}])
    plan: list[tuple[str, tuple[int, ...]]] = [
        ("token_embd.weight", (n_vocab, n_embd)),
        ("output_norm.weight", (n_embd,)),
        ("cls.output.weight", (2, n_embd)),
    ]
    for i in range(n_layer):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (n_embd,)),
            (b + "attn_q.weight", (n_head * hd, n_embd)),
            (b + "attn_k.weight", (n_kv * hd, n_embd)),
            (b + "attn_v.weight", (n_kv * hd, n_embd)),
            (b + "attn_output.weight", (n_embd, n_head * hd)),
            (b + "attn_q_norm.weight", (hd,)),
            (b + "attn_k_norm.weight", (hd,)),
            (b + "ffn_norm.weight", (n_embd,)),
            (b + "ffn_gate.weight", (n_ff, n_embd)),
            (b + "ffn_up.weight", (n_ff, n_embd)),
            (b + "ffn_down.weight", (n_embd, n_ff)),
        ]
    for name, dims in plan:
        dt = np.dtype(np.float32 if len(dims) == 1 else np.float16)
        w.add_tensor_info(name, dims, dt, int(np.prod(dims)) * dt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _, dims in plan:
        if len(dims) == 1:
            w.write_tensor_data(np.ones(dims, dtype=np.float32))
        else:
            std = 1.0 / np.sqrt(dims[1])
            w.write_tensor_data(
                (rng.standard_normal(dims, dtype=np.float32) * std).astype(np.float16)
            )
    w.close()


def model(shape: str, quant: str) -> Path:
    """The bench reranker's GGUF, written (and quantized) on first use."""
    if shape == "tiny":
        sys.path.insert(0, str(REPO))
        from tests.support.rerankmodel import make_rerank_model

        out = gen_models.cache_dir() / "models" / "rerank-tiny.gguf"
        return out if out.exists() else make_rerank_model(out.parent, name=out.name)
    out = gen_models.cache_dir() / "models" / f"rerank-{shape}-{quant}.gguf"
    f16 = out.with_name(f"rerank-{shape}-f16.gguf")
    if not f16.exists():
        f16.parent.mkdir(parents=True, exist_ok=True)
        write_reranker(f16.with_suffix(".tmp"), SHAPES[shape])
        f16.with_suffix(".tmp").replace(f16)
    if quant != "f16" and not out.exists():
        gen_models.quantize(f16, out.with_suffix(".tmp"), quant, os.cpu_count() or 2)
        out.with_suffix(".tmp").replace(out)
    return out if quant != "f16" else f16


def bodies(args: argparse.Namespace, rnd: random.Random) -> list[dict[str, Any]]:
    def text(n: int) -> str:
        return " ".join(rnd.choice(WORDS) for _ in range(n))

    return [
        {
            "model": server_bench.MODEL_NAME,
            "query": text(8),
            "documents": [text(args.doc_words) for _ in range(args.docs)],
        }
        for _ in range(args.requests)
    ]


async def run_once(url: str, work: list[dict[str, Any]], clients: int) -> float:
    """Pairs per second over all of ``work``, ``clients`` requests at a time."""
    queue = list(work)
    async with httpx.AsyncClient(timeout=3600, trust_env=False) as http:

        async def user() -> None:
            while queue:
                r = await http.post(url + "/v1/rerank", json=queue.pop())
                r.raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(user() for _ in range(clients)))
        dt = time.perf_counter() - t0
    return sum(len(b["documents"]) for b in work) / dt


def same_scores(urls: dict[str, str], body: dict[str, Any]) -> float:
    """The largest difference between ours (raw) and llama-server's score of a pair."""
    got = {}
    for who, url in urls.items():
        extra = {"raw_scores": True} if who == "ours" else {}
        r = httpx.post(url + "/v1/rerank", json={**body, **extra}, timeout=3600, trust_env=False)
        r.raise_for_status()
        got[who] = {x["index"]: x["relevance_score"] for x in r.json()["results"]}
    return max(abs(got["ours"][i] - got["theirs"][i]) for i in got["ours"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=[*SHAPES, "tiny"], default="0.6b")
    p.add_argument("--quant", choices=gen_models.QUANTS, default="f16")
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--parallel", type=int, default=4, help="slots on both servers")
    p.add_argument("--ctx", type=int, default=1024, help="context per slot")
    p.add_argument("--batch", type=int, default=512, help="llama-server's -b/-ub; our num_batch")
    p.add_argument("--docs", type=int, default=32, help="documents per request")
    p.add_argument("--doc-words", type=int, default=60)
    p.add_argument("--requests", type=int, default=8, help="requests per round and server")
    p.add_argument("--clients", type=int, default=2, help="requests in flight")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ngl", type=int, default=0, help="llama-server's -ngl (99 on a GPU)")
    args = p.parse_args(argv)
    if not (TOOLS / "llama-server").exists():
        sys.exit("llama-server missing: run bench/build_llama_tools.sh")
    gguf = model(args.shape, args.quant)
    home = gen_models.cache_dir() / "rerank-bench-home"
    server_bench.import_model(home, server_bench.MODEL_NAME, gguf)
    c1, e1, u1 = server_bench.daemon(
        home,
        {
            "LOCALLLM_NUM_PARALLEL": str(args.parallel),
            "LOCALLLM_NUM_THREAD": str(args.threads),
            "LOCALLLM_CONTEXT_LENGTH": str(args.ctx),
            "LOCALLLM_KEEP_ALIVE": "-1",
        },
    )
    port = server_bench.free_port()
    c2 = [
        str(TOOLS / "llama-server"),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--reranking",
        "-t",
        str(args.threads),
        "-np",
        str(args.parallel),
        "-c",
        str(args.ctx * args.parallel),
        "-b",
        str(args.batch),
        "-ub",
        str(args.batch),
        "-kvu",
        "--no-webui",
        "-a",
        server_bench.MODEL_NAME,
        "-ngl",
        str(args.ngl),
    ]
    u2 = f"http://127.0.0.1:{port}"
    logs = gen_models.cache_dir() / "rerank-bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (
        server_bench.serving(c1, e1, u1, "/", logs / "ours.log"),
        server_bench.serving(c2, dict(os.environ), u2, "/health", logs / "llama-server.log"),
    ):
        urls = {"ours": u1, "theirs": u2}
        rnd = random.Random(0)
        # Ours loads with the request's num_batch, as llama-server's -b/-ub.
        warm = bodies(args, rnd)[0]
        for url in urls.values():  # loads, and warms both
            httpx.post(
                url + "/v1/rerank",
                json={**warm, "options": {"num_batch": args.batch}},
                timeout=3600,
                trust_env=False,
            ).raise_for_status()
        diff = same_scores(urls, {**warm, "options": {"num_batch": args.batch}})
        print(
            f"{gguf.name}: {args.threads} threads, {args.parallel} slots, batch {args.batch}, "
            f"{args.docs} docs of {args.doc_words} words a request, {args.clients} in flight; "
            f"largest score difference ours/llama-server: {diff:.2e}",
            flush=True,
        )
        rates: dict[str, list[float]] = {"ours": [], "theirs": []}
        for i in range(args.rounds):
            work = [{**b, "options": {"num_batch": args.batch}} for b in bodies(args, rnd)]
            order = ["ours", "theirs"] if i % 2 == 0 else ["theirs", "ours"]
            for who in order:
                rates[who].append(asyncio.run(run_once(urls[who], work, args.clients)))
            print(
                f"round {i + 1}: ours {rates['ours'][-1]:.1f} pairs/s, llama-server "
                f"{rates['theirs'][-1]:.1f} pairs/s",
                flush=True,
            )
    ours, theirs = statistics.median(rates["ours"]), statistics.median(rates["theirs"])
    per_round = [a / b for a, b in zip(rates["ours"], rates["theirs"], strict=True)]
    print(
        f"median pairs/s: ours {ours:.1f}, llama-server {theirs:.1f}, ratio {ours / theirs:.3f} "
        f"(rounds {min(per_round):.3f}-{max(per_round):.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
