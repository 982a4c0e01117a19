"""What an image file's data decodes to, checked in one bounded pass before any decoder sees it.

Owns the checks past the header that ``localllm.images.info`` runs on every PNG and
JPEG, against what stb_image (libmtmd's decoder) would do with the file:

- **PNG**: the IDAT chunks, concatenated, must be one zlib stream that inflates to
  what IHDR implies (``png_data_size``: height x (1 + row bytes), Adam7's seven
  passes summed when interlaced), give or take ``PNG_SLACK`` bytes more.  stb grows
  its output buffer to whatever the stream inflates to, up to 2 GiB, before it
  compares; here the stream is inflated ``INFLATE_STEP`` bytes at a time into
  nothing and refused as soon as it passes that size.  The chunk walk is bounded
  (``MAX_PNG_CHUNKS``) and refuses what stb refuses (an unknown critical chunk, no
  IEND).  stb reads no other compressed chunk (iCCP, zTXt, iTXt are skipped unread)
  and decodes only an APNG's default image, so IDAT is the only stream it inflates.
- **JPEG**: the segments are walked from SOI to EOI (entropy-coded data skipped with
  one regular-expression search per scan: a marker is 0xFF followed by anything but
  0x00, a stuffed byte, 0xFF, fill, or 0xD0-0xD7, a restart), and scans past
  ``MAX_JPEG_SCANS`` are refused: stb makes a pass over every block of the image per
  progressive scan, so a file of thousands of tiny scans costs CPU-hours.

Both raise ``Undecodable`` (corrupt data: stb would refuse it too) or ``OverLimit``
(data that decodes to more work than its header declares); the caller names the image.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator

# libjpeg's progressive scripts write 10 scans for a colour image and at most
# 2 + 4 x components (18 for CMYK) otherwise; mozjpeg's searched scripts stay
# in the same range.  100 leaves five times the largest, and bounds stb's work to
# 100 passes over the coefficients, where a scan storm asks for millions.
MAX_JPEG_SCANS = 100
# Segments of any kind (APPn, DQT, DHT, SOS...): a real file has tens, an ICC profile
# split over 64 KiB APP2 segments a few hundred at most; each costs one step of the walk.
MAX_JPEG_SEGMENTS = 4096
# libpng writes 8 KiB IDAT chunks, so a 20 MiB file has about 2,600 chunks; 65,536
# leaves encoders with far smaller chunks room and keeps the walk to milliseconds.
MAX_PNG_CHUNKS = 65_536
INFLATE_STEP = 1 << 20  # the most inflated bytes held at once
# stb accepts a stream that inflates past the image (it was once exact, until a PNG
# in the wild ended in extra zeros), and so does libpng, with a warning: a little
# more than the image is tolerated, never a bomb's megabytes.
PNG_SLACK = 1 << 16
_FEED = 1 << 16  # compressed bytes handed to zlib at once

_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples per pixel
_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)  # (x0, y0, dx, dy) of each interlace pass
_PNG_CRITICAL = (b"IHDR", b"PLTE", b"IDAT", b"IEND")
# A marker in entropy-coded data: 0xFF, then neither a stuffed 0x00, nor more fill,
# nor a restart marker (RST0-7 sit inside a scan's data).
_JPEG_MARKER = re.compile(rb"\xff[^\x00\xff\xd0-\xd7]")
_JPEG_FILL = re.compile(rb"\xff+")
_NO_LENGTH = frozenset({0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})


class Undecodable(ValueError):
    """The data is corrupt or truncated (the message says how)."""


class OverLimit(ValueError):
    """The data would make the decoder do more than the header declares."""


def png_data_size(width: int, height: int, depth: int, colour: int, interlace: int) -> int:
    """Bytes the IDAT stream of such an image inflates to: filter byte + row, per row."""
    bits = _CHANNELS[colour] * depth

    def rows(w: int, h: int) -> int:
        return h * (1 + (w * bits + 7) // 8) if w > 0 and h > 0 else 0

    if not interlace:
        return rows(width, height)
    return sum(
        rows((width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy) for x0, y0, dx, dy in _ADAM7
    )


def check_png(data: bytes) -> None:
    """A PNG whose IDAT stream inflates to what its IHDR implies (``PNG_SLACK`` more at most)."""
    width, height, depth, colour, method, filt, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    if colour not in _CHANNELS or depth not in _DEPTHS[colour] or method or filt or interlace > 1:
        raise Undecodable(
            f"its PNG header is invalid (bit depth {depth}, colour type "
            f"{colour}, interlace {interlace})"
        )
    if struct.unpack_from(">I", data, 8)[0] != 13:
        raise Undecodable("its PNG header chunk has the wrong length")
    expected = png_data_size(width, height, depth, colour, interlace)
    _inflate(_idat(data), expected, expected + PNG_SLACK, f"{width}x{height}")


def _idat(data: bytes) -> list[memoryview]:
    """The IDAT chunks' data, in order, from a walk of every chunk up to IEND."""
    view = memoryview(data)
    pieces: list[memoryview] = []
    pos, count = 8, 0
    while pos + 8 <= len(data):
        count += 1
        if count > MAX_PNG_CHUNKS:
            raise OverLimit(f"it has more than {MAX_PNG_CHUNKS} PNG chunks")
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        if kind == b"IEND":
            if not pieces:
                raise Undecodable("its PNG has no image data")
            return pieces
        if kind == b"IDAT":
            pieces.append(view[pos + 8 : pos + 8 + length])
        elif not kind[0] & 0x20 and kind not in _PNG_CRITICAL:
            # The case bit says critical: stb refuses one it does not know.
            raise Undecodable(f"its PNG has an unknown critical chunk {kind!r}")
        pos = end
    raise Undecodable("its PNG data is truncated")


def _inflate(pieces: list[memoryview], expected: int, most: int, size: str) -> None:
    """The zlib stream in ``pieces`` inflates to ``expected`` to ``most`` bytes, holding
    at most a step of its output at once."""
    head, body = _split_head(pieces)
    # As stb reads the zlib header: deflate, no preset dictionary, check bits.  The body
    # is inflated raw, so a window size or Adler-32 that stb does not check is not refused.
    if len(head) < 2 or (head[0] * 256 + head[1]) % 31 or head[1] & 0x20 or head[0] & 15 != 8:
        raise Undecodable("its PNG data is not a zlib stream")
    inflater = zlib.decompressobj(-15)
    total = 0
    try:
        for piece in body:
            rest: bytes | memoryview = piece
            while rest and not inflater.eof:
                total += len(inflater.decompress(rest, INFLATE_STEP))
                if total > most:
                    break
                rest = inflater.unconsumed_tail
            if inflater.eof or total > most:
                break
        while not inflater.eof and total <= most:  # what the step held back
            step = inflater.decompress(b"", INFLATE_STEP)
            if not step:
                break
            total += len(step)
    except zlib.error:
        raise Undecodable("its PNG data is corrupt") from None
    if total > most:
        raise OverLimit(
            f"its PNG data inflates to more than the {expected} bytes its "
            f"{size} pixels need (a decompression bomb)"
        )
    if not inflater.eof:
        raise Undecodable("its PNG data is truncated")
    if total < expected:
        raise Undecodable(
            f"its PNG data inflates to {total} bytes; its {size} pixels need {expected}"
        )


def _split_head(pieces: list[memoryview]) -> tuple[bytes, list[memoryview]]:
    """The stream's 2-byte zlib header, and the rest in slices of at most ``_FEED`` bytes
    (zlib copies the input it has not used into ``unconsumed_tail`` at every step)."""
    head = b""
    body: list[memoryview] = []
    for piece in pieces:
        if len(head) < 2:
            take = 2 - len(head)
            head += piece[:take].tobytes()
            piece = piece[take:]
        body += (piece[k : k + _FEED] for k in range(0, len(piece), _FEED))
    return head, body


def jpeg_segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, offset, length field) of each segment after SOI, in one linear pass.

    Ends at EOI, at the end of the data, or at a byte where a marker should be and is
    not (stb stops there too); a scan's entropy-coded data is skipped with one search,
    fill bytes with one match.  Markers without a length (RSTn, TEM) give 0.  Past
    ``MAX_JPEG_SEGMENTS`` raises ``OverLimit``."""
    i, count, n = 2, 0, len(data)
    while i + 2 <= n and data[i] == 0xFF:
        marker = data[i + 1]
        if marker == 0xFF:  # fill bytes before a marker
            fill = _JPEG_FILL.match(data, i)
            assert fill is not None
            i = fill.end() - 1
            continue
        count += 1
        if count > MAX_JPEG_SEGMENTS:
            raise OverLimit(f"its JPEG has more than {MAX_JPEG_SEGMENTS} segments")
        if marker == 0xD9:  # EOI
            return
        if marker in _NO_LENGTH:
            yield marker, i, 0
            i += 2
            continue
        if i + 4 > n:
            return
        length = (data[i + 2] << 8) | data[i + 3]
        yield marker, i, length
        if length < 2:
            raise Undecodable("its JPEG has a segment shorter than its length field")
        i += 2 + length
        if marker == 0xDA:  # the scan's data runs to the next marker
            found = _JPEG_MARKER.search(data, i)
            if found is None:
                return
            i = found.start()


def check_jpeg(data: bytes) -> None:
    """A JPEG of at most ``MAX_JPEG_SCANS`` scans (each SOS marker is one)."""
    scans = 0
    for marker, _, _ in jpeg_segments(data):
        if marker == 0xDA:
            scans += 1
            if scans > MAX_JPEG_SCANS:
                raise OverLimit(
                    f"its JPEG has more than {MAX_JPEG_SCANS} scans, the limit "
                    "(an encoder writes about 10)"
                )
