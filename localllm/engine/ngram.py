"""Prompt-lookup drafts for speculative decoding: continue the text the way it went before.

Code edits, summaries and RAG answers copy long runs from their prompt.  When
the last few tokens of a slot's history (prompt + output) occurred earlier,
the tokens that followed them then are a cheap guess at what follows now; the
engine verifies the guess in the same batch as everyone else's tokens and
keeps the longest agreeing run (see ``speculate``).

:class:`NgramIndex` keeps, for every n-gram of length ``min_n``..``max_n``
that ends before the newest token, where its most recent occurrence ended, so
a lookup costs a few dictionary probes whatever the history's length.
"""

from __future__ import annotations

from collections.abc import Iterable


class NgramIndex:
    """Where each recent n-gram of a growing token history was last seen."""

    def __init__(self, *, min_n: int = 2, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n, self.max_n = min_n, max_n
        self.history: list[int] = []
        # n-gram -> index just after its latest occurrence that ends before the newest
        # token (the suffix itself is indexed only once a newer token follows it, so a
        # lookup never finds the very n-gram it is looking for).
        self._after: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: Iterable[int]) -> None:
        h = self.history
        for t in tokens:
            end = len(h)  # the n-grams ending at h[end - 1] become "earlier" now
            for n in range(self.min_n, min(self.max_n, end) + 1):
                self._after[tuple(h[end - n:end])] = end
            h.append(t)

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the longest matching earlier n-gram."""
        h = self.history
        if k <= 0:
            return []
        for n in range(min(self.max_n, len(h)), self.min_n - 1, -1):
            at = self._after.get(tuple(h[len(h) - n:]))
            if at is not None:
                return h[at:at + k]
        return []
