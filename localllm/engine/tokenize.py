"""Long texts tokenized a chunk at a time, and no further than a slot's context needs.

libllama's SentencePiece tokenizer grows its output by exactly the bytes of each
character it spells out as byte tokens (``reserve(size + n)`` in
``llm_tokenizer_spm_session::resegment``), so a run of characters outside the
vocabulary copies the whole output once per character: quadratic.  A 1 MB prompt
of such characters kept a runner busy for hours; 480 KB of ``"\\`` and newlines
took 24 s on the tiny test model.  And a prompt far longer than the context was
tokenized whole before being cut to fit.

So a text over ``LONG`` bytes is tokenized in chunks of about ``CHUNK`` bytes.  A
chunk ends only where cutting changes nothing: a cut is taken when the tokens of
the ``WINDOW`` bytes either side of it, read together, are the tokens of the two
sides read apart (no token, special token or merge spans it; a model that adds a
space before every text fails this everywhere and is never cut).  The model's
BOS/EOS go around the whole text, as one call would put them.

``slot_tokens`` reads from the front until the context is passed, and, when the
prompt may be shortened, its kept tail from the back: the work is bounded by
the context, not by the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

# (utf-8 text, add_special, parse_special) -> token ids: one libllama call.
Tokenize = Callable[[bytes, bool, bool], list[int]]

LONG = 16 << 10
CHUNK = 4 << 10
WINDOW = 64
SEARCH = 1 << 10  # bytes past a chunk's nominal end searched for a cut


def _char_start(raw: bytes, pos: int) -> int:
    """``pos`` moved back to the first byte of the UTF-8 character it falls in."""
    while 0 < pos < len(raw) and 0x80 <= raw[pos] < 0xC0:
        pos -= 1
    return pos


class Chunker:
    """Cut points of one text, found lazily and the same whichever way it is read."""

    def __init__(self, tok: Tokenize, raw: bytes, parse_special: bool) -> None:
        self.tok = tok
        self.raw = raw
        self.parse_special = parse_special
        self._cuts: dict[int, int | None] = {}

    def _clean(self, pos: int) -> bool:
        raw, tok, ps = self.raw, self.tok, self.parse_special
        lo = _char_start(raw, max(0, pos - WINDOW))
        hi = _char_start(raw, min(len(raw), pos + WINDOW))
        return tok(raw[lo:hi], False, ps) == tok(raw[lo:pos], False, ps) + tok(
            raw[pos:hi], False, ps
        )

    def cut(self, k: int) -> int | None:
        """Where chunk ``k`` (k >= 1) starts, or None where no clean cut lies near
        ``k * CHUNK`` (the chunk before runs on)."""
        if k not in self._cuts:
            start = k * CHUNK
            end = min(len(self.raw), start + SEARCH)
            found: int | None = None
            # After a newline or before a space first: where tokens rarely span.
            for candidate in (
                self.raw.find(b"\n", start, end) + 1 or None,
                self.raw.find(b" ", start, end) if b" " in self.raw[start:end] else None,
                _char_start(self.raw, start),
            ):
                if (
                    candidate is not None
                    and 0 < candidate < len(self.raw)
                    and self._clean(candidate)
                ):
                    found = candidate
                    break
            self._cuts[k] = found
        return self._cuts[k]

    def last(self) -> int:
        return (len(self.raw) - 1) // CHUNK

    def forward(self) -> Iterator[tuple[int, int]]:
        """(start, end) of each chunk, front to back."""
        start = 0
        for k in range(1, self.last() + 1):
            cut = self.cut(k)
            if cut is not None and cut > start:
                yield start, cut
                start = cut
        yield start, len(self.raw)

    def backward(self) -> Iterator[tuple[int, int]]:
        """(start, end) of each chunk, back to front (the chunks ``forward`` yields)."""
        end = len(self.raw)
        for k in range(self.last(), 0, -1):
            cut = self.cut(k)
            if cut is not None and cut < end:
                # A cut that ``forward`` would skip (not past the previous one) is
                # skipped here too: cuts only grow with k, so none can be.
                yield cut, end
                end = cut
        yield 0, end


def _specials(tok: Tokenize, probe: bytes, parse_special: bool) -> tuple[list[int], list[int]]:
    """The tokens one call adds before and after a text (BOS; EOS or SEP for some)."""
    with_ = tok(probe, True, parse_special)
    without = tok(probe, False, parse_special)
    for i in range(len(with_) - len(without) + 1):
        if with_[i : i + len(without)] == without:
            return with_[:i], with_[i + len(without) :]
    return with_[:1], []  # not expected: treat the first as a BOS


def tokenize_all(tok: Tokenize, text: str, add_special: bool, parse_special: bool) -> list[int]:
    """Every token of ``text``, as one libllama call would give them, in linear time."""
    raw = text.encode("utf-8")
    if len(raw) <= LONG:
        return tok(raw, add_special, parse_special)
    chunks = Chunker(tok, raw, parse_special)
    out: list[int] = []
    for start, end in chunks.forward():
        out.extend(tok(raw[start:end], False, parse_special))
    if not add_special:
        return out
    head, tail = _specials(tok, raw[:CHUNK], parse_special)
    return head + out + tail


def slot_tokens(
    tok: Tokenize, text: str, add_special: bool, parse_special: bool, n_ctx: int, keep: int | None
) -> tuple[list[int], bool]:
    """The tokens of ``text`` for a slot of ``n_ctx``, and whether they fit.

    Fitting: all of them.  Not fitting and ``keep`` is None (no shortening): the
    first ``n_ctx`` or more, read no further.  Not fitting, shortening: the first
    ``keep`` tokens and the last ``(n_ctx - keep) // 2``, as ``fit_prompt`` keeps,
    with nothing between them read.
    """
    raw = text.encode("utf-8")
    if len(raw) <= LONG:
        tokens = tok(raw, add_special, parse_special)
        return tokens, len(tokens) < n_ctx
    chunks = Chunker(tok, raw, parse_special)
    head, tail = _specials(tok, raw[:CHUNK], parse_special) if add_special else ([], [])
    front = list(head)
    for start, end in chunks.forward():
        front.extend(tok(raw[start:end], False, parse_special))
        if len(front) + len(tail) >= n_ctx:
            break
    else:
        front.extend(tail)
        return front, len(front) < n_ctx
    if keep is None:
        return front, False
    keep = max(0, min(keep, n_ctx // 2))
    want = max(1, (n_ctx - keep) // 2)
    back = list(tail)
    for start, end in chunks.backward():
        back[:0] = tok(raw[start:end], False, parse_special)
        if len(back) >= want:
            break
    return front[:keep] + back[-want:], False
