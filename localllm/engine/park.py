"""Idle slots parked in host memory: their cached prompts kept out of the KV cache's way.

With one unified KV buffer every step attends over every occupied cell, masked
or not, up to the highest one in use.  A finished request leaves its cells in
its slot for the next request that shares the prefix, so a daemon that has
served a few conversations attends, for every token of the current one, over
all the others: measured on the 0.5B model with three idle slots of 1,000
cells each, prefill ran at 92 instead of 118 tok/s and decode at 34 instead of
39.  llama-server has the same cache and the same cost, and avoids it the same
way (its ``--cache-ram`` prompt cache, on by default): when a request starts,
idle slots are copied into host memory and emptied.

``PromptCache`` holds those copies (``llama_state_seq_get_data``), oldest
first, within a byte budget.  A new request whose prompt shares a longer
prefix with a parked copy than with any free slot gets the copy back into its
slot (``llama_state_seq_set_data``): the same cells, bit for bit, so the reply
is what it would have been had the cells never left.  A copy that does not fit
the budget is dropped; its prompt is evaluated again if it comes back.  A
slot that a new request takes over, keeping only part of its cells, leaves a
copy of them all here first, as llama-server's slots do.  Slots
holding an image stay where they are: their cells' positions are not one per
cell.  With a budget of 0 nothing is parked and idle slots keep their cells,
as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from localllm.engine.positions import Positions
from localllm.engine.slots import common_prefix

if TYPE_CHECKING:
    from localllm.engine.model import Context
    from localllm.engine.slots import Slot


@dataclass
class Parked:
    """One slot's cells in host memory, with what the slot knew about them."""

    tokens: list[int]
    adapters: tuple[str, ...]
    exact: int  # Slot.exact: cells from here on are not reusable (after a context shift)
    data: Any  # cffi uint8_t[]: llama.cpp's copy of the cells
    size: int

    def reusable(self, prompt: list[int], adapters: tuple[str, ...]) -> int:
        if adapters != self.adapters:
            return 0
        n = common_prefix(self.tokens, prompt)
        return n if self.exact < 0 else min(n, self.exact)


class PromptCache:
    """Parked slot copies, least recently parked first, holding at most ``budget`` bytes."""

    def __init__(self, ctx: Context, budget: int) -> None:
        self.ctx = ctx
        self.budget = budget
        self.entries: list[Parked] = []
        self.used = 0

    def park(self, slot: Slot) -> None:
        """Copy a free, text-only slot's cells here (when they fit) and empty the slot."""
        if not slot.cache or not slot.free or not slot.pos.text_only():
            return
        self.keep(slot)
        self.ctx.seq_rm(slot.seq, -1, -1)
        slot.cache = []
        slot.pos.clear()
        slot.exact = -1

    def keep(self, slot: Slot) -> None:
        """Copy a text-only slot's cells here, when they fit and are not here already."""
        if not slot.cache or not slot.pos.text_only():
            return
        reusable = len(slot.cache) if slot.exact < 0 else slot.exact
        for e in self.entries:
            # Already here as part of a longer copy (users sharing a system prompt park
            # it once each): a second copy would only take room.
            if e.adapters == slot.adapters and e.reusable(slot.cache, slot.adapters) >= reusable:
                return
        saved = self.ctx.seq_save(slot.seq)
        if saved is None or saved[1] > self.budget:
            return
        data, size = saved
        # Copies this one contains whole are redundant now.
        self.entries = [e for e in self.entries
                        if not self._within(e, slot.cache[:reusable], slot.adapters)]
        self.used = sum(e.size for e in self.entries)
        while self.entries and self.used + size > self.budget:
            self.used -= self.entries.pop(0).size
        self.entries.append(Parked(list(slot.cache), slot.adapters, slot.exact, data, size))
        self.used += size

    @staticmethod
    def _within(e: Parked, tokens: list[int], adapters: tuple[str, ...]) -> bool:
        return (e.adapters == adapters and len(e.tokens) <= len(tokens)
                and common_prefix(e.tokens, tokens) == len(e.tokens) and e.exact < 0)

    def best(self, prompt: list[int], adapters: tuple[str, ...]) -> tuple[Parked, int] | None:
        """The parked copy sharing the longest reusable prefix with ``prompt``, and its length."""
        best: tuple[Parked, int] | None = None
        for e in self.entries:
            n = e.reusable(prompt, adapters)
            if n > 0 and (best is None or n > best[1]):
                best = (e, n)
        return best

    def restore(self, entry: Parked, slot: Slot) -> bool:
        """Put ``entry`` back as free ``slot``'s cells, parking what the slot held first;
        the copy leaves the cache either way.  False: llama.cpp found no room, and the
        slot is left empty."""
        # Out of the list before parking: making room for the slot's own copy could
        # otherwise push this one out.
        self.entries = [e for e in self.entries if e is not entry]
        self.used = sum(e.size for e in self.entries)
        self.park(slot)
        ok = self.ctx.seq_load(slot.seq, entry.data, entry.size)
        slot.pos = Positions()
        if not ok:
            self.ctx.seq_rm(slot.seq, -1, -1)
            slot.cache, slot.exact = [], -1
            return False
        slot.cache = list(entry.tokens)
        slot.pos.add_text(len(entry.tokens))
        slot.adapters, slot.exact = entry.adapters, entry.exact
        return True
