"""One parked copy of a slot's cells: what ``park.py`` keeps in host memory and
``diskcache.py`` writes to disk (a leaf both import, so neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from localllm.engine.slots import common_prefix


@dataclass
class Parked:
    """One slot's cells in host memory, with what the slot knew about them."""

    tokens: list[int]
    adapters: tuple[str, ...]
    exact: int  # Slot.exact: cells from here on are not reusable (after a context shift)
    data: Any  # cffi uint8_t[]: llama.cpp's copy of the cells (None: only on disk)
    size: int
    file: str = ""  # its file in the disk cache, once written there

    def reusable(self, prompt: list[int], adapters: tuple[str, ...], n_swa: int = 0) -> int:
        """Leading cells a prompt may take from this copy (see the module doc on windows)."""
        if adapters != self.adapters:
            return 0
        n = common_prefix(self.tokens, prompt)
        if n_swa and n < len(self.tokens) and len(self.tokens) > n_swa:
            return 0
        return n if self.exact < 0 else min(n, self.exact)
