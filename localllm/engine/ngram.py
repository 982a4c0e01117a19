"""Prompt-lookup drafts for speculative decoding: continue the text the way it went before.

Code edits, summaries and RAG answers copy long runs from their prompt.  When
the last few tokens of a slot's history (prompt + output) occurred earlier,
the tokens that followed them then are a cheap guess at what follows now; the
engine verifies the guess in the same batch as everyone else's tokens and
keeps the longest agreeing run (see ``speculate``).

:class:`NgramIndex` keeps, for every n-gram of length ``min_n``..``max_n``
that ends before the newest token, where its most recent occurrence ended, so
a lookup costs a few dictionary probes whatever the history's length.  Tokens
are indexed when a draft is first asked for, not when they arrive: a request's
prompt is added at admission, and indexing it then would delay its first token
for a lookup that may never run (a sampled request under ``"auto"`` never drafts).
"""

from __future__ import annotations

from collections.abc import Iterable

# The most tokens one draft holds, whoever drafts (prompt lookup here, the draft model
# in draft.py), whatever the request asked: each is a row of the step's shared batch
# and of its logits (n_vocab floats), and one request asking for thousands filled every
# step's batch with guesses.  64 is llama.cpp's largest default (its prompt lookup's
# n_max); the daemon refuses more (api/speculation.py), and speculate.add_drafts cuts
# each draft further to the batch and context room the step has left.
MAX_DRAFT = 64


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
        self._indexed = 1  # the n-grams ending before history[i] are in _after for i < this

    def extend(self, tokens: Iterable[int]) -> None:
        self.history.extend(tokens)

    def _catch_up(self) -> None:
        h, after, lo, hi = self.history, self._after, self.min_n, self.max_n
        for end in range(self._indexed, len(h)):  # n-grams ending at h[end - 1]
            for n in range(lo, min(hi, end) + 1):
                after[tuple(h[end - n : end])] = end
        self._indexed = max(self._indexed, len(h))

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens: what followed the longest matching earlier n-gram, and
        on from there while the draft runs out before ``k`` (a short cycle such as a
        repeated line is followed round more than once, as llama.cpp's lookup does)."""
        k = min(k, MAX_DRAFT)
        self._catch_up()
        h, out = self.history, list[int]()
        while len(out) < k:
            tail = (h[-self.max_n :] + out)[-self.max_n :]
            at = None
            for n in range(len(tail), self.min_n - 1, -1):
                at = self._after.get(tuple(tail[len(tail) - n :]))
                if at is not None:
                    break
            if at is None:
                break
            out.extend(h[at : at + k - len(out)])
        return out
