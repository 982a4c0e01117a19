"""One step's batch: every decoding slot's next token, then prompt chunks, then drafts.

``fill_batch`` is the per-step half of continuous batching (engine.py decodes the
batch once and samples each slot): decoding slots go first, one token each, since
their tokens are what users are waiting for (with, after them, the forced close of a
thinking block whose budget is spent, thinking.py); prompts then take what the step's
budget (budget.py) and ``n_batch`` leave; speculating slots add their drafts in
what is left after that (``speculate.add_drafts``).  Drafts come last so that a
prompt is cut into the same chunks, and its first token read from the same
logits, whether or not another slot speculates: drafts are guesses, a prompt is
work that must be done.  A prompt's text stops at its next image: images are
decoded by ``vision.image_step``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from localllm.engine.speculate import add_drafts

if TYPE_CHECKING:
    from localllm.engine.draft import Drafter
    from localllm.engine.draftcost import DraftCost
    from localllm.engine.model import Batch
    from localllm.engine.slots import Slot


def fill_batch(
    batch: Batch,
    slots: Sequence[Slot],
    n_batch: int,
    step: int,
    only: tuple[str, ...] | None = None,
    n_ctx_slot: int = 0,
    prompt_budget: Callable[[int], int] | None = None,
    drafter: Drafter | None = None,
    draft_cost: DraftCost | None = None,
) -> list[tuple[Slot, int, bool]]:
    """Decode tokens, prompt chunks, then drafts into the batch:
    [(slot, len before, prefill)].

    ``only``: just the slots of that adapter set (None: every slot).  ``draft_cost``:
    the engine's step times, which decide what drafting this batch pays for."""
    batch.clear()
    part: list[tuple[Slot, int, bool]] = []
    forcing: list[Slot] = []
    for s in slots:
        s.logits_index = -1
        a = s.active
        if a is None or (only is not None and a.adapters != only):
            continue
        if not a.prefilling and (a.pending >= 0 or a.forced):
            a.last_step = step
            part.append((s, len(s.cache), False))
            if a.pending >= 0:
                s.logits_index = batch.add(a.pending, s.pos.add_text(1), s.seq, not a.forced)
                s.cache.append(a.pending)
                a.pending = -1
            if a.forced:
                forcing.append(s)
    for s in forcing:  # a thinking block's forced close (thinking.py), as a prompt chunk
        a = s.active
        assert a is not None
        chunk = a.forced[: n_batch - len(batch)]
        del a.forced[: len(chunk)]
        idx = batch.add_seq(chunk, s.pos.add_text(len(chunk)), s.seq, True) if chunk else -1
        s.cache.extend(chunk)
        s.logits_index = -1 if a.forced else idx  # the model goes on after the last one
    budget = n_batch - len(batch)
    if prompt_budget is not None and len(batch):
        # Decode first: generating slots' tokens set the pace, prompts get what the step
        # budget leaves them (budget.py); with no slot generating they fill the batch.
        budget = min(budget, prompt_budget(len(batch)))
    for s in slots:
        a = s.active
        if (
            a is None
            or not a.prefilling
            or budget <= 0
            or (only is not None and a.adapters != only)
        ):
            continue
        a.last_step = step
        end = a.n_past + budget
        if a.marks:  # a chunk ends where a copy of the cells is kept
            end = min(end, a.marks[0])
        if a.media is not None and (end := a.media.text_end(a.n_past, end)) == a.n_past:
            continue
        chunk = a.prompt[a.n_past : end]
        last = a.n_past + len(chunk) == len(a.prompt)
        part.append((s, len(s.cache), True))
        idx = batch.add_seq(chunk, s.pos.add_text(len(chunk)), s.seq, last and not a.forced)
        s.cache.extend(chunk)
        a.n_past += len(chunk)
        budget -= len(chunk)
        if last and not a.forced:  # else a forced close follows the prompt next step
            s.logits_index = idx
    # Only slots that decode this step draft: one whose prompt ended in this batch reads
    # its first token from the prompt's logits before any draft joins it.
    decoding = [s for s, _, prefill in part if not prefill and s not in forcing]
    plan = draft_cost.plan(len(batch), len(decoding)) if draft_cost is not None else None
    add_drafts(batch, decoding, n_batch, n_ctx_slot, drafter, plan)
    return part
