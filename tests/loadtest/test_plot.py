"""The PNG writer: a valid file whose pixels show the series drawn."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from localllm.loadtest.plot import PALETTE, Series, latency_plot, line_chart, nice_ticks
from localllm.loadtest.stats import LevelSummary, RequestResult, summarize


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows; checks the signature, every CRC and the filter bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, kinds = 8, b"", []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc
        kinds.append(kind)
        if kind == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", body[:10])
            assert (depth, colour) == (8, 2)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND"
    raw = zlib.decompress(idat)
    assert len(raw) == h * (1 + 3 * w)
    rows = [raw[y * (1 + 3 * w) : (y + 1) * (1 + 3 * w)] for y in range(h)]
    assert all(r[0] == 0 for r in rows)
    return w, h, [r[1:] for r in rows]


def _count(rows: list[bytes], color: tuple[int, int, int]) -> int:
    px = bytes(color)
    return sum(1 for r in rows for i in range(0, len(r), 3) if r[i : i + 3] == px)


def test_chart_is_a_valid_png_with_each_series_drawn() -> None:
    series = [
        Series("A", ((1, 0.5), (10, 1.0), (50, 3.0)), PALETTE[0]),
        Series("B", ((1, 0.2), (10, 0.4), (50, 0.9)), PALETTE[1]),
    ]
    w, h, rows = decode_png(
        line_chart(series, title="T", x_label="X", y_label="Y", width=400, height=300)
    )
    assert (w, h) == (400, 300)
    assert _count(rows, PALETTE[0]) > 100 and _count(rows, PALETTE[1]) > 100
    assert _count(rows, PALETTE[2]) == 0
    assert _count(rows, (0, 0, 0)) > 200  # axes and text


def test_nice_ticks() -> None:
    assert nice_ticks(3.1) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert nice_ticks(0.9) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0.0) == [0.0, 1.0]


def test_latency_plot_writes_file(tmp_path: Path) -> None:
    def level(c: int) -> LevelSummary:
        return summarize(c, [RequestResult(ttft=0.1 * c, e2e=0.2 * c, output_tokens=2)], 1.0)

    out = latency_plot([level(1), level(10)], tmp_path / "p.png", budget_p95=1.5)
    w, _, rows = decode_png(out.read_bytes())
    assert w > 0 and _count(rows, PALETTE[3]) > 50  # E2E p95 line
