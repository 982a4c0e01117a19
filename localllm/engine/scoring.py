"""Scoring fixed answers: each option's log-probability after a prompt, from one prefix.

A decision question (``/v1/systemone``) is a prompt and a short list of answers;
what it needs is ``log P(option | prompt)`` for each, summed over the option's
tokens, not a generated text.  For one prompt this module:

1. evaluates the prompt once, in the free slot that already holds the longest
   prefix of it (the state shared by a request's questions is read once), with
   logits on its last token only;
2. reads every option's first token from those logits: most options (``true``,
   a level's digit, a one-token label) are done here;
3. branches the options of several tokens from the prompt: each gets a free
   slot's sequence, the prompt's cells shared into it with
   ``llama_memory_seq_cp`` (one unified KV cache: shared, not copied), and ONE
   decode holds all their tokens, every one with logits; token ``j``'s logits
   score token ``j + 1``.  An option's last token is never evaluated: nothing
   is read after it.  More branching options than free slots (or than the batch
   holds) take more decodes of the same kind; the prompt is still read once.

Exact by construction: a branch sees the prompt and its own tokens only (its own
sequence), which is what the option's tokens would see were they the prompt's
continuation.  The slots used keep what they hold (prompt, or prompt and a
branch), as embeddings' slots do, so a later request sharing the prefix reuses
it.  Runs between engine steps, in free slots only (``ServerBusy`` when none is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localllm.engine.sharing import holds
from localllm.engine.slots import OVERFLOW, Slot, cut, pick_slot
from localllm.engine.tokenize import slot_tokens
from localllm.errors import InvalidRequest, LocalLLMError, ServerBusy

if TYPE_CHECKING:
    from localllm.engine.model import Batch, Context

# Tokens one option may take: options are labels (a name, ``true``, a digit), and each
# of an option's tokens but its last is a row of a branch's decode.
MAX_OPTION_TOKENS = 64


@dataclass
class Scored:
    """One prompt's options scored: the sums, in the options' order, and the counts."""

    logprobs: list[float]
    prompt_tokens: int  # the prompt as the model reads it
    evaluated: int  # tokens decoded for it: the prompt's unreused part and the branches


def score(
    ctx: Context,
    batch: Batch,
    slots: Sequence[Slot],
    n_ctx_slot: int,
    prompt: str,
    options: Sequence[str],
) -> Scored:
    """``log P(option | prompt)`` for each option (see the module doc)."""
    free = [s for s in slots if s.free]
    if not free:
        raise ServerBusy("every slot is busy generating; retry the scoring request")
    model = ctx.model
    toks, fits = slot_tokens(model.tokenize_bytes, prompt, True, True, n_ctx_slot, None)
    if not toks:
        raise InvalidRequest("the prompt is empty")
    opts = [model.tokenize(o, False, False) for o in options]
    longest = max((len(o) for o in opts), default=0)
    for text, o in zip(options, opts, strict=True):
        if not o:
            raise InvalidRequest(f"option {text!r} has no tokens")
        if len(o) > MAX_OPTION_TOKENS or len(o) - 1 > batch.capacity:
            raise InvalidRequest(
                f"option {text[:40]!r} takes {len(o)} tokens; an option may take at most "
                f"{min(MAX_OPTION_TOKENS, batch.capacity + 1)}"
            )
    if not fits or len(toks) + longest > n_ctx_slot:
        raise InvalidRequest(
            f"{OVERFLOW}: the prompt and its longest option take at least "
            f"{len(toks) + longest} tokens, the context holds {n_ctx_slot}"
        )
    base, row, evaluated = _prefill(ctx, batch, free, toks)
    # Each distinct first token once: reading one is a pass over the whole vocabulary.
    first = {t: _logprob(ctx, row, t) for t in dict.fromkeys(o[0] for o in opts)}
    sums = [first[o[0]] for o in opts]
    long = [i for i, o in enumerate(opts) if len(o) > 1]
    if long:
        evaluated += _branch(ctx, batch, free, base, toks, opts, long, sums)
    return Scored(sums, len(toks), evaluated)


def _logprob(ctx: Context, row: int, token: int) -> float:
    """``token``'s log-probability in output ``row`` of the last decode (raw logits)."""
    lp, top = ctx.top_logprobs(row, token, 1)
    if not top:
        raise LocalLLMError("llama.cpp kept no logits for a scored token")
    return lp


def _reset(ctx: Context, slot: Slot) -> None:
    ctx.seq_rm(slot.seq, -1, -1)
    slot.cache.clear()
    slot.pos.clear()
    slot.exact = -1


def _prefill(
    ctx: Context, batch: Batch, free: list[Slot], toks: list[int]
) -> tuple[Slot, int, int]:
    """The prompt in the free slot holding most of it: that slot, the output row of the
    prompt's last token in the last decode, and the tokens decoded."""
    picked = pick_slot(free, toks, ())
    assert picked is not None
    slot, n = picked
    n = cut(ctx, slot, min(n, len(toks) - 1))  # the last token is read again: its logits
    n_swa = ctx.model.n_swa
    # Position n sees n - n_swa + 1 .. n: a window cache must still hold those cells.
    if n and (not slot.pos.text_only() or (n_swa and not holds(ctx, slot, max(0, n - n_swa + 1)))):
        n = 0
    return slot, *_evaluate(ctx, batch, slot, toks, n)


def _evaluate(ctx: Context, batch: Batch, slot: Slot, toks: list[int], n: int) -> tuple[int, int]:
    """Evaluate ``toks[n:]`` after the first ``n`` cells ``slot`` holds, in decodes of the
    batch's size: the last token's output row and the tokens decoded."""
    if n == 0:
        _reset(ctx, slot)
    slot.adapters = ()  # scores are the base model's (the engine applied no adapter)
    start, row = n, -1
    while start < len(toks):
        part = toks[start : start + batch.capacity]
        last = start + len(part) == len(toks)
        batch.clear()
        row = batch.add_seq(part, start, slot.seq, last)
        rc = ctx.decode(batch)
        if rc != 0:
            _reset(ctx, slot)  # what the failed decode left is unknown
            raise LocalLLMError(f"scoring failed: llama_decode returned {rc}")
        slot.cache.extend(part)
        slot.pos.add_text(len(part))
        start += len(part)
    return row, len(toks) - n


def _branch(
    ctx: Context,
    batch: Batch,
    free: list[Slot],
    base: Slot,
    toks: list[int],
    opts: list[list[int]],
    long: list[int],
    sums: list[float],
) -> int:
    """Add the later tokens' logprobs of the options ``long`` (indexes into ``opts``) to
    ``sums``, each option in its own sequence branching from ``base``'s prompt; returns
    the tokens decoded.  As many options a decode as there are free slots and room."""
    p = len(toks)
    # The base slot last: the others copy the prompt from it before it takes a branch.
    seqs = [s for s in free if s is not base] + [base]
    evaluated = 0
    i = 0
    while i < len(long):
        if cut(ctx, base, p) < p:  # a memory that cannot drop the last branch alone
            evaluated += _evaluate(ctx, batch, base, toks, 0)[1]
        batch.clear()
        group: list[tuple[int, list[int]]] = []  # option, its rows
        used = 0
        for slot in seqs:
            if i >= len(long) or used + len(opts[long[i]]) - 1 > batch.capacity:
                break
            o = opts[long[i]]
            _hold_prompt(ctx, slot, base, toks)
            rows = [batch.add(t, p + j, slot.seq, True) for j, t in enumerate(o[:-1])]
            slot.cache.extend(o[:-1])
            slot.pos.add_text(len(o) - 1)
            group.append((long[i], rows))
            used += len(o) - 1
            i += 1
        rc = ctx.decode(batch)
        if rc != 0:
            for slot in seqs:
                _reset(ctx, slot)
            raise LocalLLMError(f"scoring failed: llama_decode returned {rc}")
        for k, rows in group:
            o = opts[k]
            sums[k] += sum(_logprob(ctx, r, t) for r, t in zip(rows, o[1:], strict=True))
        evaluated += used
    return evaluated


def _hold_prompt(ctx: Context, slot: Slot, base: Slot, toks: list[int]) -> None:
    """Make ``slot`` hold exactly the prompt ``base`` holds, as shared cells."""
    p = len(toks)
    if slot is base:  # cut to the prompt before the decode was filled
        return
    held = slot.cache[:p] == toks and slot.reusable(p) == p and slot.adapters == ()
    if held and slot.pos.text_only() and cut(ctx, slot, p) == p:
        return  # it held the prompt already: an earlier decode's branch dropped
    _reset(ctx, slot)
    ctx.seq_cp(base.seq, slot.seq, 0, p)
    slot.cache.extend(toks)
    slot.pos.add_text(p)
    slot.adapters = ()
