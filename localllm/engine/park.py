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
copy of them all here first, as llama-server's slots do, and a copy brought
back stays here too until a longer one contains it, since the new request may
cut it short.  Fewer than ``MIN_SHARE`` shared tokens are not worth a copy.

A sliding-window model (Gemma 3) saves only the window's cells for its window
layers, so a copy serves a prompt only if the prompt continues it whole (the
next position's window is all there) or it is no longer than the window.  Slots
holding an image stay where they are: their cells' positions are not one per
cell.  With a budget of 0 nothing is parked and idle slots keep their cells,
as before.

With a disk budget too (``diskcache.py``) every copy taken here is also written
to disk, and so are the idle slots' cells once the engine has nothing left to do
(``save_idle``: a runner ended for an unload or a restart has no later chance);
a prompt that continues a copy on disk further than anything here brings it
back through ``restore`` like any parked copy, so the same rules hold for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from localllm.engine.parked import Parked
from localllm.engine.positions import Positions
from localllm.engine.sharing import MIN_SHARE
from localllm.engine.slots import Slot

if TYPE_CHECKING:
    from localllm.engine.diskcache import DiskCache
    from localllm.engine.model import Context

AUTO_MAX = 8 << 30  # the automatic budget's ceiling: llama-server's --cache-ram default


def budget(setting: int, kv_bytes: int) -> int:
    """Bytes for parked copies: ``setting`` (LoadOptions.prompt_cache), or with -1 as
    many as the KV cache takes, up to ``AUTO_MAX``, so the runner grows by at most that."""
    return setting if setting >= 0 else min(AUTO_MAX, kv_bytes)


class PromptCache:
    """Parked slot copies, least recently used first, holding at most ``budget`` bytes.

    ``n_swa``: the model's attention window (0: none); ``disk``: the tier behind this one."""

    def __init__(
        self, ctx: Context, budget: int, n_swa: int = 0, disk: DiskCache | None = None
    ) -> None:
        self.ctx = ctx
        self.budget = budget
        self.n_swa = n_swa
        self.disk = disk
        self.entries: list[Parked] = []

    @property
    def used(self) -> int:
        return sum(e.size for e in self.entries)

    def on_admit(self, slot: Slot, prompt: list[int], adapters: tuple[str, ...], n: int) -> int:
        """Before free ``slot``, sharing ``n`` cells with ``prompt``, takes it: bring back
        a copy that shares more, or keep a copy of the cells past ``n`` that are about to
        go.  Returns the cells the prompt may reuse."""
        hit = self.best(prompt, adapters)
        far = self.disk.best(prompt, adapters) if self.disk is not None else None
        if far is not None and far[1] > max(n, hit[1] if hit else 0):
            assert self.disk is not None
            entry = self.disk.load(far[0])
            if entry is not None:
                if self.restore(entry, slot):
                    return far[1]
                # Whole and this model's, yet llama.cpp refused it (another V layout, with
                # flash attention on "auto" resolved otherwise): no use reading it again.
                self.entries = [e for e in self.entries if e is not entry]
                self.disk.drop(far[0])
                return 0
        if hit is not None and hit[1] > n:
            return hit[1] if self.restore(hit[0], slot) else 0
        if n < len(slot.cache):
            self.keep(slot)
        return n

    def park_idle(self, slots: list[Slot]) -> None:
        for s in slots:
            self.park(s)

    def save_idle(self, slots: list[Slot]) -> None:
        """Copy the free slots' cells here and to disk, leaving them in place: called when
        the engine has nothing to do, so the copy costs no request a step."""
        for s in slots:
            if s.free:
                self.keep(s)

    def close(self, timeout: float | None = None) -> None:
        """Let the disk writer finish what is queued, within ``CACHE_FLUSH_S``."""
        if self.disk is not None:
            from localllm.runner.messages import CACHE_FLUSH_S

            self.disk.close(CACHE_FLUSH_S if timeout is None else timeout)

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
        if any(e.reusable(slot.cache, slot.adapters, self.n_swa) >= reusable for e in self.entries):
            # Already here, whole or inside a longer copy (users sharing a system prompt
            # park it once each): a second copy would only take room.
            return
        saved = self.ctx.seq_save(slot.seq)
        if saved is None:
            return
        data, size = saved
        new = Parked(list(slot.cache), slot.adapters, slot.exact, data, size)
        if self.disk is not None:
            self.disk.put(new)
        if size > self.budget:
            return
        # Copies this one serves as well are redundant now.
        self.entries = [
            e
            for e in self.entries
            if not (e.exact < 0 and new.reusable(e.tokens, e.adapters, self.n_swa) >= len(e.tokens))
        ]
        self._add(new)

    def _add(self, entry: Parked) -> None:
        self.entries.append(entry)
        while self.used > self.budget:
            self.entries.pop(0)  # the least recently used

    def best(self, prompt: list[int], adapters: tuple[str, ...]) -> tuple[Parked, int] | None:
        """The parked copy sharing the longest reusable prefix with ``prompt`` (at least
        ``MIN_SHARE`` tokens), and its length."""
        best: tuple[Parked, int] | None = None
        for e in self.entries:
            n = e.reusable(prompt, adapters, self.n_swa)
            if n >= MIN_SHARE and (best is None or n > best[1]):
                best = (e, n)
        return best

    def restore(self, entry: Parked, slot: Slot) -> bool:
        """Put ``entry`` back as free ``slot``'s cells, parking what the slot held first.
        The copy stays here as the most recently used (the new request may keep only
        part of it).  False: llama.cpp found no room, and the slot is left empty."""
        # Out of the list while parking: making room for the slot's own copy must not
        # push this one out.
        self.entries = [e for e in self.entries if e is not entry]
        self.park(slot)
        self._add(entry)
        if entry.file and self.disk is not None:
            self.disk.touch(entry)  # its file is in use: the last to go
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
