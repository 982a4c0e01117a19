"""Speculative decoding inside the batched engine: drafts in, verified tokens out.

A decoding slot whose request speculates (``CompletionRequest.draft_tokens``)
puts its pending token *and* up to that many drafted tokens (``ngram``: what
followed the last time its history looked like this; ``draft``: what the
runner's draft model guesses, see ``draft.py``) into the same batch as
every other slot's tokens, each with an output row.  After the one
``llama_decode``, :func:`verify` samples row by row with the request's own
sampler: the token sampled after position *i* is exactly what plain decoding
would have produced there, so while it equals draft *i* the draft's cell is
already right and sampling goes on from the next row; at the first difference
(or the end of the request) the remaining drafts' cells are cut from the KV
cache.  Output is therefore the same as without speculation, greedy or
sampled: every token still comes from the target distribution given the exact
prefix, which is the sample-and-compare check llama.cpp's server uses too.

Under ``"auto"``, whether a step drafts at all, and how long, is also the batch's
call (``draftcost.py``): from the engine's own step times, a draft token is added
only where its chance of being accepted beats what its row costs the other
streams, and all such drafts together may stretch a step to at most 1.5 times its
plain time.  One copy-heavy stream drafts long; a busy batch on a compute-bound
device not at all.  ``"ngram"`` and ``"draft"`` were asked for by name: they draft
as their window says, whatever the batch.

Drafting starts after the prompt: a prefilling slot drafts nothing, so the
prompt is split into batches exactly as without speculation and the first token
comes from the same logits.  ``"auto"`` (the default without a draft model) is
lookup that keeps out of the way where it does not pay: it drafts only when the
request's own text offers a match (as ``"ngram"`` does), starts with a short
window, stops for the request after ``AUTO_MISSES`` drafting steps in a row
accepted nothing, and never runs for a sampled request (temperature > 0), where
four streams measured 25% slower with lookup (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from localllm.engine.draft import Want
from localllm.engine.draftcost import DraftPlan, acceptance, worth
from localllm.engine.ngram import NgramIndex
from localllm.engine.slots import Active, Slot, cut
from localllm.runner.messages import CompletionRequest, Event

if TYPE_CHECKING:
    from localllm.engine.draft import Drafter
    from localllm.engine.model import Batch, Context

# Engine.take: sample output row ``row`` as the token after the slot's first ``cells``
# cells and handle it; its events and the token (-1: the request ended before it).
Take = Callable[[Slot, int, int], tuple[list[Event], int]]

# "auto": drafting steps in a row that accepted nothing before lookup stops for the
# request.  Each rejected row costs a share of a step (on a CPU and a large vocabulary,
# a fifth or more), so a request whose matches keep failing stops paying after a few.
AUTO_MISSES = 4
# "auto": the accepted run a first draft assumes, i.e. a window of 3 tokens (see
# draft_window): a chance match in free text then costs 3 rows, not draft_max; each
# draft accepted whole about doubles the window (3, 7, 15, 16), so copying soon ramps up.
AUTO_START = 1.0


class Lookup(NgramIndex):
    """A request's prompt-lookup index and, under ``"auto"``, its run of missed steps."""

    def __init__(self, *, auto: bool) -> None:
        super().__init__()
        self.auto = auto
        self.misses = 0  # drafting steps in a row that accepted nothing


def speculation(req: CompletionRequest, prompt: list[int]) -> NgramIndex | None:
    """The lookup index a request drafts from, seeded with its prompt; None if it doesn't."""
    if req.draft_tokens <= 0 or req.draft_mode == "draft" or any(t < 0 for t in prompt):
        return None  # images: their cells are keys, not tokens a draft could copy
    auto = req.draft_mode == "auto"
    if auto and req.sampling.temperature > 0:
        return None  # sampled: the stream strays from its text, and drafts cost the others
    index = Lookup(auto=auto)
    index.extend(prompt)  # indexed at its first draft (ngram.py), not before the first token
    return index


def add_drafts(
    batch: Batch,
    slots: Sequence[Slot],
    n_batch: int,
    n_ctx_slot: int,
    drafter: Drafter | None = None,
    plan: DraftPlan | None = None,
) -> None:
    """Append each speculating decoding slot's drafted tokens (after its pending one):
    prompt-lookup drafts, or the draft model's for requests that ask for it (all those
    slots drafted together, see ``draft.py``).  ``plan`` (``draftcost.py``) prices a
    draft row against this step's batch and bounds the rows all drafts may add."""
    wants: list[tuple[Slot, Want]] = []
    room_left = plan.room if plan is not None else n_batch  # rows "auto"'s drafts may add
    for s in slots:
        a = s.active
        if a is None or s.logits_index < 0 or a.prefilling:
            continue
        by_model = (
            drafter is not None
            and a.req.draft_mode == "draft"
            and a.req.draft_tokens > 0
            and a.media is None
        )
        if a.ngram is None and not by_model:
            continue
        gated = plan is not None and a.req.draft_mode == "auto"
        room = min(draft_window(a), n_batch - len(batch))
        if n_ctx_slot:
            room = min(room, n_ctx_slot - len(s.cache) - 1)  # one cell for the next token
        if a.req.num_predict > 0:
            room = min(room, a.req.num_predict - len(a.generated) - 1)
        if gated and plan is not None:  # only the tokens whose chance beats their row's price
            p = acceptance(a.accepted, a.rejected)
            room = worth(p, plan.price, min(room, room_left))
        if room <= 0:
            continue  # a.drafts is empty: verify() emptied it last step
        if by_model:
            wants.append((s, Want(s.seq, s.cache, room, a.req.draft_p_min, a.req.draft_min)))
        elif a.ngram is not None:
            drafts = a.ngram.draft(room)
            _append(batch, s, drafts)
            if gated:
                room_left -= len(drafts)
    if wants and drafter is not None:
        drafter.propose([w for _, w in wants])
        for s, w in wants:  # each slot's room was checked against the batch's before
            _append(batch, s, w.drafts[: n_batch - len(batch)])


def _append(batch: Batch, s: Slot, drafts: list[int]) -> None:
    a = s.active
    assert a is not None
    for t in drafts:
        a.draft_rows.append(batch.add(t, s.pos.add_text(1), s.seq, True))
        s.cache.append(t)
    a.drafts = drafts


def draft_window(a: Active) -> int:
    """How many tokens to draft this step: about twice the accepted run of late.

    Every drafted token costs a row in the batch (and a draft-model decode), so a
    draft that keeps missing after a token or two should not make every step verify
    sixteen; one that keeps agreeing drafts the request's maximum.  ``a.draft_run``
    (a moving average of tokens accepted per step) starts at that maximum, so
    drafting starts at full length (under ``"auto"``, at ``AUTO_START``).  Never
    below ``draft_min``, which would stop drafting, and with it what this window
    learns, for good."""
    req = a.req
    run = _start(a) if a.draft_run < 0 else a.draft_run
    return min(req.draft_tokens, max(1, req.draft_min, int(2 * run + 1)))


def _start(a: Active) -> float:
    """The accepted run a slot's first draft assumes (see ``draft_window``)."""
    return AUTO_START if a.req.draft_mode == "auto" else float(a.req.draft_tokens)


def verify(ctx: Context, s: Slot, take: Take) -> list[Event]:
    """Sample the pending token's row and the drafts' rows in order (``take``, the
    engine's own sampling step); keep what agrees and cut the rest from ``ctx``."""
    a = s.active
    assert a is not None
    drafts, rows = a.drafts, [s.logits_index, *a.draft_rows]
    a.drafts, a.draft_rows = [], []
    a.drafted += len(drafts)
    base = len(s.cache) - len(drafts)  # valid cells: up to the pending token
    out: list[Event] = []
    i = 0
    for i, row in enumerate(rows):
        events, t = take(s, row, base + i)
        out.extend(events)
        # A forced close of a thinking block (thinking.py) comes next, not the drafts.
        if s.active is not a or i == len(drafts) or t != drafts[i] or a.forced:
            break
        a.accepted += 1
        a.pending = -1  # the drafted token's cell is in the cache already
    if drafts:
        if i < len(drafts):  # a miss after i accepted tokens
            a.rejected += 1
            a.draft_run = i if a.draft_run < 0 else (a.draft_run + i) / 2
        else:  # all accepted: the run was at least this long, so the average must not fall
            a.draft_run = max(a.draft_run, i)
        look = a.ngram
        if isinstance(look, Lookup) and look.auto:
            look.misses = 0 if i else look.misses + 1
            if look.misses >= AUTO_MISSES:
                a.ngram = None  # matches keep failing: this request goes on without lookup
    if len(s.cache) > base + i:
        cut(ctx, s, base + i)  # the drafts after the first disagreement
    return out
