"""A PNG line chart with no plotting library: an RGB canvas, lines, a 3×5 font, zlib.

``localllm bench --plot`` draws latency against concurrency.  Pulling in
matplotlib (tens of megabytes, slow to import) for one chart would cost every
install more than these lines cost us; the chart needs only axes, ticks,
labelled polylines and a legend, written as an 8-bit RGB PNG (signature, IHDR,
one zlib IDAT of filter-0 rows, IEND).
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from localllm.loadtest.stats import LevelSummary

RGB = tuple[int, int, int]
WHITE: RGB = (255, 255, 255)
BLACK: RGB = (0, 0, 0)
GRID: RGB = (225, 225, 225)
PALETTE: tuple[RGB, ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
)

# 3 columns × 5 rows per glyph, rows top to bottom separated by spaces, "#" is ink.
_GLYPHS = {
    "0": "### #.# #.# #.# ###",
    "1": ".#. ##. .#. .#. ###",
    "2": "### ..# ### #.. ###",
    "3": "### ..# .## ..# ###",
    "4": "#.# #.# ### ..# ..#",
    "5": "### #.. ### ..# ###",
    "6": "### #.. ### #.# ###",
    "7": "### ..# .#. .#. .#.",
    "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ###",
    ".": "... ... ... ... .#.",
    "-": "... ... ### ... ...",
    "%": "#.# ..# .#. #.. #.#",
    "/": "..# ..# .#. #.. #..",
    ":": "... .#. ... .#. ...",
    "(": ".#. #.. #.. #.. .#.",
    ")": ".#. ..# ..# ..# .#.",
    " ": "... ... ... ... ...",
    "A": ".#. #.# ### #.# #.#",
    "B": "##. #.# ##. #.# ##.",
    "C": "### #.. #.. #.. ###",
    "D": "##. #.# #.# #.# ##.",
    "E": "### #.. ### #.. ###",
    "F": "### #.. ### #.. #..",
    "G": "### #.. #.# #.# ###",
    "H": "#.# #.# ### #.# #.#",
    "I": "### .#. .#. .#. ###",
    "K": "#.# #.# ##. #.# #.#",
    "L": "#.. #.. #.. #.. ###",
    "M": "#.# ### ### #.# #.#",
    "N": "##. #.# #.# #.# #.#",
    "O": "### #.# #.# #.# ###",
    "P": "### #.# ### #.. #..",
    "R": "##. #.# ##. #.# #.#",
    "S": "### #.. ### ..# ###",
    "T": "### .#. .#. .#. .#.",
    "U": "#.# #.# #.# #.# ###",
    "V": "#.# #.# #.# #.# .#.",
    "W": "#.# #.# ### ### #.#",
    "X": "#.# #.# .#. #.# #.#",
    "Y": "#.# #.# .#. .#. .#.",
}
SCALE = 2  # font pixels per glyph cell


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    color: RGB


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.px = bytearray(WHITE * (width * height))

    def dot(self, x: int, y: int, color: RGB, size: int = 1) -> None:
        for dy in range(size):
            for dx in range(size):
                xx, yy = x + dx, y + dy
                if 0 <= xx < self.w and 0 <= yy < self.h:
                    i = 3 * (yy * self.w + xx)
                    self.px[i : i + 3] = bytes(color)

    def line(
        self, x0: int, y0: int, x1: int, y1: int, color: RGB, width: int = 1, dash: int = 0
    ) -> None:
        """Bresenham; ``dash`` > 0 leaves gaps of that many pixels."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, step = dx + dy, 0
        while True:
            if not dash or (step // dash) % 2 == 0:
                self.dot(x0 - width // 2, y0 - width // 2, color, width)
            if x0 == x1 and y0 == y1:
                return
            e2, step = 2 * err, step + 1
            if e2 >= dy:
                err, x0 = err + dy, x0 + sx
            if e2 <= dx:
                err, y0 = err + dx, y0 + sy

    def text(self, x: int, y: int, text: str, color: RGB = BLACK) -> None:
        for n, ch in enumerate(text.upper()):
            glyph = _GLYPHS.get(ch, _GLYPHS[" "]).replace(" ", "")
            for i, cell in enumerate(glyph):
                if cell == "#":
                    gx = x + n * 4 * SCALE + (i % 3) * SCALE
                    self.dot(gx, y + (i // 3) * SCALE, color, SCALE)

    def png(self) -> bytes:
        rows = b"".join(
            b"\x00" + bytes(self.px[3 * self.w * y : 3 * self.w * (y + 1)]) for y in range(self.h)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b"")
        )


def text_width(text: str) -> int:
    return len(text) * 4 * SCALE


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top`` (1, 2 or 5 times a power of ten)."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _fmt(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e5 else f"{value:.0e}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    hline: tuple[str, float] | None = None,
    width: int = 800,
    height: int = 480,
) -> bytes:
    """The PNG bytes of a line chart; x is log-scaled when it spans a factor of 8 or more."""
    cv = Canvas(width, height)
    left, right, top, bottom = 70, width - 190, 40, height - 60
    xs = sorted({x for s in series for x, _ in s.points}) or [1.0]
    ys = [y for s in series for _, y in s.points if math.isfinite(y)]
    if hline:
        ys.append(hline[1])
    yticks = nice_ticks(max(ys, default=1.0))
    log_x = xs[0] > 0 and xs[-1] / xs[0] >= 8

    def fx(x: float) -> int:
        lo, hi = (math.log(xs[0]), math.log(xs[-1])) if log_x else (xs[0], xs[-1])
        v = math.log(x) if log_x else x
        return left + (round((v - lo) / (hi - lo) * (right - left)) if hi > lo else 0)

    def fy(y: float) -> int:
        return bottom - round(y / yticks[-1] * (bottom - top))

    for t in yticks:
        cv.line(left, fy(t), right, fy(t), GRID)
        label = _fmt(t)
        cv.text(left - 6 - text_width(label), fy(t) - 5, label)
    for x in xs:
        cv.line(fx(x), bottom, fx(x), bottom + 5, BLACK)
        label = _fmt(x)
        cv.text(fx(x) - text_width(label) // 2, bottom + 9, label)
    cv.line(left, top, left, bottom, BLACK)
    cv.line(left, bottom, right, bottom, BLACK)
    cv.text((left + right - text_width(title)) // 2, 12, title)
    cv.text((left + right - text_width(x_label)) // 2, bottom + 30, x_label)
    cv.text(8, top - 22, y_label)
    legend_y = top
    for s in series:
        pts = [(fx(x), fy(y)) for x, y in s.points if math.isfinite(y)]
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            cv.line(x0, y0, x1, y1, s.color, width=2)
        for x, y in pts:
            cv.dot(x - 3, y - 3, s.color, 7)
        cv.line(right + 15, legend_y + 5, right + 35, legend_y + 5, s.color, width=3)
        cv.text(right + 42, legend_y, s.label)
        legend_y += 20
    if hline:
        cv.line(left, fy(hline[1]), right, fy(hline[1]), (120, 120, 120), width=2, dash=6)
        cv.line(right + 15, legend_y + 5, right + 35, legend_y + 5, (120, 120, 120), dash=3)
        cv.text(right + 42, legend_y, hline[0])
    return cv.png()


def latency_plot(
    levels: Sequence[LevelSummary], path: Path, budget_p95: float | None = None
) -> Path:
    """Write TTFT and end-to-end p50/p95 against concurrency to ``path``."""
    picks = (
        ("TTFT P50", "ttft", "p50"),
        ("TTFT P95", "ttft", "p95"),
        ("E2E P50", "e2e", "p50"),
        ("E2E P95", "e2e", "p95"),
    )
    series = [
        Series(
            label,
            tuple((float(lv.concurrency), float(getattr(getattr(lv, dist), q))) for lv in levels),
            PALETTE[i],
        )
        for i, (label, dist, q) in enumerate(picks)
    ]
    hline = (f"P95 BUDGET {budget_p95:g} SEC", budget_p95) if budget_p95 else None
    png = line_chart(
        series,
        title="LATENCY VS CONCURRENT USERS",
        x_label="CONCURRENT USERS",
        y_label="SECONDS",
        hline=hline,
    )
    path.write_bytes(png)
    return path
