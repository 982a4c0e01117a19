"""Prefix sharing across slots: a prompt's prefix already in another slot is not computed again.

Agents and RAG apps send many requests that open with the same long system
prompt.  A request reuses the cache of the slot it lands on (``pick_slot``),
but when eight users arrive together each lands on its own slot and each would
evaluate the same prefix.  Before every step, a slot still prefilling looks for
the slot (busy or free) whose cells share the longest prefix with its prompt,
and takes those cells with ``llama_memory_seq_cp``: with the unified KV cache
the cells are shared between the two sequences, not copied, so the prefix costs
neither compute nor memory twice.  Checking at every step, rather than once at
admission, lets requests that arrive together follow the first one: each takes
over what the first has evaluated so far instead of racing it.

Only text is shared: an image's cells sit at positions that are not one per
cell (M-RoPE), and what a slot holds after an image differs between slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from localllm.engine.slots import Slot, common_prefix

if TYPE_CHECKING:
    from localllm.engine.model import Context

MIN_SHARE = 16  # tokens: fewer are as cheap to evaluate as to look for


def share_prefixes(ctx: Context, slots: Sequence[Slot], n_swa: int = 0) -> None:
    """Give each prefilling slot the longest prefix of its prompt another slot holds.

    ``n_swa``: the model's sliding window.  Its layers' cache drops cells that fell
    out of the window, so a donor may no longer hold the start of the range; the
    taker only ever attends to the last ``n_swa`` cells before its next position, so
    the donor must hold those (the full-attention layers' cache keeps every cell)."""
    for s in slots:
        a = s.active
        if a is None or not a.prefilling or a.media is not None or not s.pos.text_only():
            continue
        assert len(s.cache) == a.n_past  # a prefilling slot holds exactly its evaluated prompt
        donor, n = None, a.n_past + MIN_SHARE - 1
        for d in slots:
            if d is s or d.adapters != a.adapters or not d.pos.text_only():
                continue
            # The last prompt token is always evaluated: its logits start the reply.
            common = min(d.reusable(common_prefix(d.cache, a.prompt)), len(a.prompt) - 1)
            if common > n and holds(
                ctx, d, a.n_past if not n_swa else max(a.n_past, common - n_swa)
            ):
                donor, n = d, common
        if donor is None:
            continue
        # Text only on both sides: cell i sits at position i.
        ctx.seq_cp(donor.seq, s.seq, a.n_past, n)
        s.cache.extend(a.prompt[a.n_past : n])
        s.pos.add_text(n - a.n_past)
        a.cached += n - a.n_past
        a.n_past = n


def holds(ctx: Context, slot: Slot, first: int) -> bool:
    """Whether the slot's sequence still holds every cell from position ``first`` on (a
    sliding-window cache drops cells that fell out of the window)."""
    low = ctx.seq_pos_min(slot.seq)
    return 0 <= low <= first
