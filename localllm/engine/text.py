"""Turning generated token bytes into safe text, the one place stop strings are handled.

``TextStream`` receives each token's raw bytes and releases only text that
can no longer change: complete UTF-8 characters (a character split across
tokens waits for its last byte) that cannot be the start of a stop string.
When a stop string appears, the text before it is released and the rest,
the stop string included, is never emitted.
"""

from __future__ import annotations

import codecs


def _held_suffix(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


class TextStream:
    """Incremental UTF-8 decoding plus stop-string hold-back for one generation."""

    def __init__(self, stops: list[str] | None = None) -> None:
        self.stops = [s for s in (stops or []) if s]
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        self.stopped = False
        self.matched = ""  # the stop string that ended the text (Anthropic reports it)

    def feed(self, data: bytes) -> str:
        """Add one token's bytes; return the text now safe to emit (maybe empty)."""
        if self.stopped:
            return ""
        self._held += self._dec.decode(data)
        if not self.stops:
            out, self._held = self._held, ""
            return out
        first = -1
        for s in self.stops:
            i = self._held.find(s)
            if i >= 0 and (first < 0 or i < first):
                first, self.matched = i, s
        if first >= 0:
            out = self._held[:first]
            self._held = ""
            self.stopped = True
            return out
        keep = _held_suffix(self._held, self.stops)
        cut = len(self._held) - keep
        out, self._held = self._held[:cut], self._held[cut:]
        return out

    def flush(self) -> str:
        """At the end of generation: release held-back text; an unfinished
        UTF-8 sequence is dropped rather than emitted broken."""
        if self.stopped:
            return ""
        out, self._held = self._held, ""
        self._dec.reset()
        return out
