"""Rerank: score documents against a query with a reranker GGUF, on the scheduler.

A reranker is a model with a classification head (``cls.*`` tensors: bge-reranker,
jina-reranker, Qwen3-Reranker; ``ModelInfo.rank_head``).  It is loaded as
llama-server's ``--reranking`` loads it: embeddings on, rank pooling, and the
engine's slots (``LOCALLLM_NUM_PARALLEL``) each taking one query–document pair,
as many pairs a decode as fit in its batch.  A model without a head is refused
with a 400 before anything loads: rank pooling over plain hidden states gives
numbers that look like scores and are not.

Each pair is laid out as the model was trained to read it (``pair_format``): the
GGUF's ``tokenizer.chat_template.rerank`` when it has one (Qwen3-Reranker's
converter writes it), else llama-server's ``[BOS] query [EOS] [SEP] document
[EOS]`` with the tokenizer's own add-BOS/EOS/SEP rules.

Scores: the head's first output.  Qwen3's graph ends in a softmax, so that is
P(yes) already; every other head gives a logit, turned into a probability by a
sigmoid (as vLLM and Text Embeddings Inference do for a one-label head), so
``relevance_score`` is always in [0, 1] and thresholds mean the same for every
model.  ``raw_scores`` gives the head's output as it is (what llama-server
returns).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localllm.errors import InvalidRequest
from localllm.gguf.info import ModelInfo, tokenizer_adds_bos
from localllm.inference.options import resolve_options
from localllm.inference.service import InferenceService, Target, base_load
from localllm.runner.messages import LoadOptions, PairFormat

# Pairs in one runner call: a call holds the runner's engine thread, so a long list
# goes in parts and other requests for the model (and its health checks) get turns.
CHUNK = 256
# Architectures whose rank graph ends in a softmax over the labels (llama.cpp's
# build_pooling): their first output is a probability already.
SOFTMAX_ARCHS = frozenset({"qwen3", "qwen3vl"})
# BPE pre-tokenizers for which llama.cpp adds a separator (llama-vocab.cpp).
_BPE_PRE_WITH_SEP = frozenset({"jina-v1-en", "jina-v2-code", "roberta-bpe"})


@dataclass(frozen=True)
class Scored:
    scores: list[float]  # per document, in the request's order
    n_tokens: int
    load_ns: int


def require_reranker(target: Target, model: str) -> None:
    if not target.info.rank_head:
        raise InvalidRequest(
            f'model "{model}" cannot rerank: it has no classification head (a reranker '
            "GGUF such as bge-reranker, jina-reranker or Qwen3-Reranker has one); scores "
            "read from its embeddings would look plausible and be wrong"
        )


def rerank_target(svc: InferenceService, model: str) -> Target:
    """The model, checked to be a reranker (a worker thread's work: it reads the store)."""
    if not model:
        raise InvalidRequest("model is required")
    target = svc.target(model)
    require_reranker(target, model)
    return target


def rerank_load(target: Target, options: Mapping[str, object] | None) -> LoadOptions:
    """How a reranker loads (``/api/tokenize`` loads one the same way, not twice).

    A pair must fit in one micro-batch (``num_batch``), so a slot never holds more: its
    context is that unless ``num_ctx`` says otherwise (LOCALLLM_CONTEXT_LENGTH and the
    planner's default are for chats: cells past a pair would be KV memory never used)."""
    resolved = resolve_options(target.params, options)
    load = base_load(resolved)
    load.embedding = True
    load.rerank = True
    if resolved.load.num_ctx is None:
        load.n_ctx = load.n_ubatch
    return load


def pair_format(info: ModelInfo) -> PairFormat:
    """How ``info``'s model reads a query–document pair (see the module doc)."""
    kv = info.kv
    template = kv.get("tokenizer.chat_template.rerank")
    if isinstance(template, str) and template:
        return PairFormat(template=template)
    model, pre = kv.get("tokenizer.ggml.model"), kv.get("tokenizer.ggml.pre")

    def flag(key: str, default: bool) -> bool:
        value = kv.get(f"tokenizer.ggml.{key}")
        return value if isinstance(value, bool) else default

    # llama.cpp's defaults per tokenizer (llama_vocab::load), then the GGUF's own say.
    add_eos = flag("add_eos_token", model == "t5")
    add_sep = flag(
        "add_sep_token", model == "bert" or (model == "gpt2" and pre in _BPE_PRE_WITH_SEP)
    )
    sep = kv.get("tokenizer.ggml.seperator_token_id")  # sic: llama.cpp's key
    if not isinstance(sep, int) or isinstance(sep, bool) or not 0 <= sep < info.n_vocab:
        sep = 102 if model == "bert" else -1  # WordPiece's [SEP] by default
    return PairFormat(add_bos=tokenizer_adds_bos(kv), add_eos=add_eos, add_sep=add_sep, sep=sep)


def probability(info: ModelInfo, raw: float) -> float:
    """The head's output as a relevance in [0, 1] (see the module doc)."""
    if info.architecture in SOFTMAX_ARCHS:
        return raw
    if raw >= 0:  # the two halves keep exp from overflowing
        return 1.0 / (1.0 + math.exp(-raw))
    e = math.exp(raw)
    return e / (1.0 + e)


async def rerank(
    svc: InferenceService,
    target: Target,
    query: str,
    documents: Sequence[str],
    *,
    truncate: bool = True,
    raw: bool = False,
    options: Mapping[str, object] | None = None,
    keep_alive: Any = None,
) -> Scored:
    """Each document's score against ``query``, the pairs' tokens and the load time."""
    require_reranker(target, target.spec.name)
    load = rerank_load(target, options)
    fmt = pair_format(target.info)
    start = time.monotonic_ns()
    scores: list[float] = []
    n_tokens = 0
    async with svc.scheduler.use(target.spec, load, svc.keep_alive(keep_alive)) as model:
        waited = time.monotonic_ns() - start
        for i in range(0, len(documents), CHUNK):
            part, n = await model.runner.rerank(
                query, list(documents[i : i + CHUNK]), fmt, truncate
            )
            scores += part
            n_tokens += n
    if not raw:
        scores = [probability(target.info, s) for s in scores]
    return Scored(scores, n_tokens, waited if waited > 1_000_000 else 0)
