"""Context shift: a generation that fills its slot's context goes on instead of stopping.

As llama-server and Ollama do: keep the first ``num_keep`` cells (the start of the
prompt, BOS included), drop the older half of the rest, and move the newer half
down to follow them (``llama_memory_seq_rm`` + ``llama_memory_seq_add``, which
re-rotates the keys).  The model then sees the beginning and the recent half of the
conversation.  Only where the memory can move cells: not for recurrent models, and
not for sliding-window ones (their window cache keeps cells by position, which the
move would scramble), nor for a slot holding an image (its cells' positions are
not one per cell); there the request stops with ``length`` as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localllm.engine.model import Context
    from localllm.engine.slots import Slot


def shift(ctx: Context, slot: Slot, num_keep: int) -> bool:
    """Make room in ``slot``: False when it cannot (the caller then stops the request)."""
    a = slot.active
    cells = len(slot.cache)
    if a is None or not slot.pos.text_only():
        return False
    keep = len(a.prompt) if num_keep < 0 else max(num_keep, 1)  # BOS stays
    discard = (cells - keep) // 2
    if discard <= 0:
        return False
    if not ctx.seq_rm(slot.seq, keep, keep + discard):
        return False
    ctx.seq_add(slot.seq, keep + discard, cells, -discard)
    del slot.cache[keep : keep + discard]
    slot.exact = keep if slot.exact < 0 else min(slot.exact, keep)
    slot.pos.clear()
    slot.pos.add_text(len(slot.cache))
    return True
