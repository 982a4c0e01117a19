"""Embeddings and rerank scores: pooled outputs of whole inputs, using free slots.

Each input is tokenized, fitted to what one micro-batch and one slot can hold,
and decoded in its own sequence; as many inputs share a decode as there are
free slots and batch room.  The slots used lose their cached prefix.

Embeddings are L2-normalised pooled vectors.  Rerank scores come from a context
made with rank pooling (``LoadOptions.rerank``): llama.cpp runs the model's
classification head on each sequence's pooled state and hands back ``n_cls_out``
floats where an embedding would be; the first is the score, as llama-server
reads it.  A query–document pair is one input, laid out as ``PairFormat`` says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from localllm.engine.slots import OVERFLOW, Slot, common_prefix, cut
from localllm.errors import InvalidRequest, LocalLLMError, ServerBusy
from localllm.runner.messages import PairFormat

if TYPE_CHECKING:
    from localllm.engine.model import Batch, Context, Model

T = TypeVar("T")
POOLING_NONE = 0
POOLING_RANK = 4  # LLAMA_POOLING_TYPE_RANK


def _normalise(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v] if norm > 0 else v


def _free(slots: Sequence[Slot], what: str) -> list[Slot]:
    free = [s for s in slots if s.free]
    if not free:
        raise ServerBusy(f"every slot is busy generating; retry the {what}")
    return free


def embed(
    ctx: Context,
    batch: Batch,
    slots: Sequence[Slot],
    n_ctx_slot: int,
    inputs: list[str],
    *,
    truncate: bool = True,
) -> tuple[list[list[float]], int]:
    """Each input's vector and the prompt token count, decoded in the free ``slots``
    (``batch``: the engine's, of n_batch tokens; ``ctx`` made with embeddings on)."""
    if ctx.pooling == POOLING_RANK:
        # Its outputs are relevance scores, not vectors: refused, never passed off as one.
        raise InvalidRequest(
            "this model is a reranker (its head scores query-document "
            "pairs); it cannot embed: use /api/rerank"
        )
    free = _free(slots, "embedding")
    limit = min(n_ctx_slot, batch.capacity)
    seqs: list[list[int]] = []
    for text in inputs:
        toks = ctx.model.tokenize(text, True, True)
        if not toks:
            raise InvalidRequest("cannot embed an empty input")
        if len(toks) > limit:
            if not truncate:
                raise InvalidRequest(OVERFLOW)
            toks = toks[:limit]
        seqs.append(toks)
    pooled = ctx.pooling != POOLING_NONE

    def read(seq: int, idx: int) -> list[float]:
        v = ctx.embedding(seq=seq) if pooled else ctx.embedding(index=idx)
        if v is None:
            raise LocalLLMError("llama.cpp returned no embedding for this model")
        return _normalise(v)

    return (_decode_all(ctx, batch, free, seqs, read, "embedding"), sum(len(t) for t in seqs))


def rerank(
    ctx: Context,
    batch: Batch,
    slots: Sequence[Slot],
    n_ctx_slot: int,
    query: str,
    documents: list[str],
    fmt: PairFormat,
    *,
    truncate: bool = True,
) -> tuple[list[float], int]:
    """Each document's score against ``query`` (the head's first output, as it comes:
    the caller turns it into a probability) and the token count of all the pairs."""
    if ctx.pooling != POOLING_RANK:
        raise InvalidRequest("this model was not loaded for reranking (rerank=True)")
    free = _free(slots, "rerank")
    limit = min(n_ctx_slot, batch.capacity)
    seqs = [pair_tokens(ctx.model, query, doc, fmt, limit, truncate) for doc in documents]

    def read(seq: int, idx: int) -> float:
        # n_cls_out floats, where an embedding's n_embd would be: the first only.
        score = ctx.score(seq)
        if score is None:
            raise LocalLLMError("llama.cpp returned no rerank score for this model")
        return score

    return (
        _decode_all(ctx, batch, free, seqs, read, "rerank", reuse=True),
        sum(len(t) for t in seqs),
    )


def pair_tokens(
    model: Model, query: str, doc: str, fmt: PairFormat, limit: int, truncate: bool
) -> list[int]:
    """One query–document pair as the model reads it, at most ``limit`` tokens: a long
    document loses its end (the template's closing text, which tells the head where
    to answer, is kept); without ``truncate`` that is a 400 instead."""
    if fmt.template:

        def render(d: str) -> list[int]:
            return model.tokenize(fill(fmt.template, query, d), False, True)

        toks = render(doc)
        if len(toks) <= limit:
            return toks
        if not truncate:
            raise InvalidRequest(
                f"{OVERFLOW}: a query-document pair takes {len(toks)} "
                f"tokens, the context holds {limit}"
            )
        # Cut the document's tokens by the overshoot and render again; a cut can
        # tokenize differently at its edge, so a few rounds settle it.
        doc_toks = model.tokenize(doc, False, False)
        keep = len(doc_toks)
        for _ in range(8):
            keep = max(0, keep - (len(toks) - limit))
            toks = render(model.detokenize(doc_toks[:keep]))
            if len(toks) <= limit:
                return toks
            if keep == 0:
                break
        raise InvalidRequest(
            f"{OVERFLOW}: the query and the pair template alone take "
            f"{len(toks)} tokens, the context holds {limit}"
        )
    eos = model.eos if model.eos >= 0 else fmt.sep
    head = [model.bos] if fmt.add_bos and model.bos >= 0 else []
    head += model.tokenize(query, False, False)
    if fmt.add_eos and eos >= 0:
        head.append(eos)
    if fmt.add_sep and fmt.sep >= 0:
        head.append(fmt.sep)
    tail = [eos] if fmt.add_eos and eos >= 0 else []
    body = model.tokenize(doc, False, False)
    room = limit - len(head) - len(tail)
    if len(body) > room:
        if not truncate or room < 0:
            raise InvalidRequest(
                f"{OVERFLOW}: a query-document pair takes "
                f"{len(head) + len(body) + len(tail)} tokens, the context "
                f"holds {limit}"
            )
        body = body[:room]
    toks = head + body + tail
    if not toks:
        raise InvalidRequest("cannot rerank an empty query and document")
    return toks


def fill(template: str, query: str, doc: str) -> str:
    """``template`` with ``{query}`` and ``{document}`` filled in, in one pass: a query
    that happens to hold the text ``{document}`` stays as it is."""
    out: list[str] = []
    i = 0
    while True:
        q, d = template.find("{query}", i), template.find("{document}", i)
        if q < 0 and d < 0:
            out.append(template[i:])
            return "".join(out)
        if d < 0 or 0 <= q < d:
            out += [template[i:q], query]
            i = q + len("{query}")
        else:
            out += [template[i:d], doc]
            i = d + len("{document}")


def _decode_all(
    ctx: Context,
    batch: Batch,
    free: list[Slot],
    seqs: list[list[int]],
    read: Callable[[int, int], T],
    what: str,
    *,
    reuse: bool = False,
) -> list[T]:
    """Decode each token list in its own free slot, as many at a time as fit in the
    batch, and ``read(seq, index of its last token)`` each one's output, in order.

    ``reuse`` (rank pooling, which reads only each sequence's last token): a slot keeps
    the cells of the pair it last held, and the next pair goes to the free slot holding
    the longest prefix of it and evaluates only the rest, as llama-server's slots do.
    The template and the query come first in every pair, so a request's later pairs
    cost their document only.  A model without a KV cache (bidirectional: BERT and
    its kin) keeps no cells, and each pair is evaluated whole.
    """
    out: list[T] = []
    n_batch = batch.capacity
    ctx.set_embeddings(True)
    try:
        i = 0
        while i < len(seqs):
            batch.clear()
            group: list[tuple[Slot, int]] = []  # the slot and the index of its last token
            idle = list(free)
            used = 0
            while i < len(seqs) and idle:
                toks = seqs[i]
                slot, n = _place(idle, toks) if reuse else (idle[0], 0)
                if used + len(toks) - n > n_batch:
                    break
                idle.remove(slot)
                if n:
                    n = cut(ctx, slot, n)
                else:
                    ctx.seq_rm(slot.seq, -1, -1)
                    slot.cache.clear()
                    slot.pos.clear()
                idx = batch.add_seq(toks[n:], n, slot.seq, True)
                slot.cache.extend(toks[n:])
                slot.pos.add_text(len(toks) - n)
                group.append((slot, idx))
                used += len(toks) - n
                i += 1
            rc = ctx.decode(batch)
            if rc != 0:
                for slot, _ in group:  # what the failed decode left is unknown
                    ctx.seq_rm(slot.seq, -1, -1)
                    slot.cache.clear()
                    slot.pos.clear()
                raise LocalLLMError(f"{what} failed: llama_decode returned {rc}")
            for slot, idx in group:
                out.append(read(slot.seq, idx))
                if not reuse or ctx.seq_pos_min(slot.seq) != 0:  # no cells kept
                    ctx.seq_rm(slot.seq, -1, -1)
                    slot.cache.clear()
                    slot.pos.clear()
    finally:
        ctx.set_embeddings(False)
    return out


def _place(idle: list[Slot], toks: list[int]) -> tuple[Slot, int]:
    """The idle slot holding the longest prefix of ``toks`` (ties: the least filled) and
    how much of it to keep: all but the last token at most, whose output is read."""
    best, n = idle[0], -1
    for s in idle:
        k = common_prefix(s.cache, toks)
        if k > n or (k == n and len(s.cache) < len(best.cache)):
            best, n = s, k
    return best, min(n, len(toks) - 1)
