"""Decoder positions of a slot's KV cells: where each cell sits and where the next one goes.

Owns the split between a slot's cache length (its cells, one per key: what prefix
reuse compares and what the per-slot context limit counts) and its next position.
The two are equal for text and for the images of most models, but an M-RoPE model
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL) places an image's nx*ny embeddings on a grid that
starts at one temporal position and moves the next position on by only libmtmd's
``n_pos`` (max(nx, ny)), so after an image the two differ for good.

``Positions`` records a slot's cells as runs (text, or one image) and gives the
next position; ``truncate`` keeps cells up to an index (``slots.cut`` drops the rest
from the memory).  llama.cpp's memory removes by position, and an image's cells
share or interleave positions, so a cut that falls inside an image moves back to
the image's start: the image goes whole.  Where an image's embeddings go (libmtmd's
4-component grid for M-RoPE models) is the projector's to ask (vision.py); text
tokens need one position each: llama.cpp copies it into every section of a token
batch, which is what libmtmd's own helper relies on too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Run:
    cell: int  # its first cell
    pos: int  # that cell's position (for an image: the image's start position)
    n: int  # cells
    image: bool  # an image: cut whole, its cells' positions not one per cell


class Positions:
    """A slot's cells as runs of positions; ``cells`` always equals the slot's cache length."""

    def __init__(self) -> None:
        self._runs: list[_Run] = []
        self.cells = 0
        self.next = 0  # the position the next text token or image starts at

    def add_text(self, n: int) -> int:
        """Take ``n`` text cells at the next positions; returns the first one's position."""
        p = self.next
        last = self._runs[-1] if self._runs else None
        if last is not None and not last.image and last.pos + last.n == p:
            last.n += n
        else:
            self._runs.append(_Run(self.cells, p, n, False))
        self.cells += n
        self.next += n
        return p

    def add_image(self, n: int, n_pos: int, first: bool) -> int:
        """Take ``n`` cells of an image (its first part when ``first``, else more of the
        image being decoded); returns the image's start position.  The next position
        moves past the whole image at once: nothing else of this slot is decoded
        before its last part."""
        if first:
            p = self.next
            self._runs.append(_Run(self.cells, p, n, True))
            self.next = p + n_pos
        else:
            last = self._runs[-1]
            assert last.image
            last.n += n
            p = last.pos
        self.cells += n
        return p

    def truncate(self, n: int) -> tuple[int, int | None]:
        """Keep the first ``n`` cells (fewer when that would split an image): the cells
        kept, and the position from which the memory must drop (None: nothing to drop)."""
        if n >= self.cells:
            return self.cells, None
        i = next(k for k, r in enumerate(self._runs) if r.cell <= n < r.cell + r.n)
        r = self._runs[i]
        if r.image:
            n = r.cell
        p = r.pos if r.image else r.pos + n - r.cell
        r.n = n - r.cell
        del self._runs[i + (r.n > 0) :]
        self.cells, self.next = n, p
        return n, p

    def text_only(self) -> bool:
        """No image among the cells: cell ``i`` sits at position ``i``."""
        return not any(r.image for r in self._runs) and self.next == self.cells

    def clear(self) -> None:
        self._runs.clear()
        self.cells = self.next = 0
