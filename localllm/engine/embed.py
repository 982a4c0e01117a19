"""Embeddings: pooled, L2-normalised vectors of whole inputs, using free slots.

Each input is tokenized, fitted to what one micro-batch and one slot can hold,
and decoded in its own sequence; as many inputs share a decode as there are
free slots and batch room.  The slots used lose their cached prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from localllm.engine.slots import OVERFLOW, Slot
from localllm.errors import InvalidRequest, LocalLLMError, ServerBusy

if TYPE_CHECKING:
    from localllm.engine.model import Batch, Context

POOLING_NONE = 0


def _normalise(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v] if norm > 0 else v


def embed(ctx: Context, batch: Batch, slots: Sequence[Slot], n_ctx_slot: int,
          inputs: list[str], *, truncate: bool = True) -> tuple[list[list[float]], int]:
    """Each input's vector and the prompt token count, decoded in the free ``slots``
    (``batch``: the engine's, of n_batch tokens; ``ctx`` made with embeddings on)."""
    free = [s for s in slots if s.free]
    if not free:
        raise ServerBusy("every slot is busy generating; retry the embedding")
    n_batch = batch.capacity
    limit = min(n_ctx_slot, n_batch)
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

    out: list[list[float]] = []
    pooled = ctx.pooling != POOLING_NONE
    ctx.set_embeddings(True)
    try:
        i = 0
        while i < len(seqs):
            batch.clear()
            group: list[tuple[int, int]] = []  # (seq id, index of its last token)
            used = 0
            while i < len(seqs) and len(group) < len(free) and used + len(seqs[i]) <= n_batch:
                slot = free[len(group)]
                ctx.seq_rm(slot.seq, -1, -1)
                slot.cache.clear()
                slot.pos.clear()
                idx = batch.add_seq(seqs[i], 0, slot.seq, True)
                group.append((slot.seq, idx))
                used += len(seqs[i])
                i += 1
            rc = ctx.decode(batch)
            if rc != 0:
                raise LocalLLMError(f"embedding failed: llama_decode returned {rc}")
            for seq, idx in group:
                v = ctx.embedding(seq=seq) if pooled else ctx.embedding(index=idx)
                if v is None:
                    raise LocalLLMError("llama.cpp returned no embedding for this model")
                out.append(_normalise(v))
                ctx.seq_rm(seq, -1, -1)
    finally:
        ctx.set_embeddings(False)
    return out, sum(len(t) for t in seqs)
