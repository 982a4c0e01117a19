"""HEIF files (AVIF, HEIC) read box by box: the codec brand, the declared size, the frames' sizes.

Owns what ``localllm.images.info`` needs of the ISO base media file format before
any decoder sees an AVIF:

- ``probe``: the brand (``ftyp``: AVIF, or HEIC to be refused by name) and the
  declared size, the largest width and height of the ``ispe`` (image spatial
  extents) properties in ``meta/iprp/ipco``: a grid's, a tile's, an alpha plane's or
  a thumbnail's, none is larger than what the decoder will make.
- ``check_frames``: every AV1 item's sequence header (found through ``iinf`` and
  ``iloc``) declares a largest frame within that size.  libavif does not hold the
  AV1 stream to ``ispe``: a 4 KB file whose ``ispe`` says 64x48 over a 16000x16000
  stream costs half a gigabyte and seconds of decoding, so its sequence header is
  read here first.  A file with a ``moov`` box (an AVIF sequence, whose frames
  libavif takes from the track) is refused rather than walked.

Walks are bounded (``MAX_BOXES`` boxes, ``MAX_OBUS`` OBUs an item); failures are
``images.data.Undecodable`` (corrupt) or ``images.data.OverLimit`` (more than declared).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from localllm.images.data import OverLimit, Undecodable

AVIF_BRANDS = frozenset({b"avif", b"avis"})
HEIC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx"})
MAX_BOXES = 4096  # boxes walked in all (a real file has tens)
MAX_OBUS = 16  # OBUs read in an item before its sequence header (it comes first)
MAX_ITEMS = 4096  # items listed or located (a grid of 64x64 tiles has 4,097 at most)
_PROPS = (b"iprp", b"ipco")


def boxes(b: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, body start, body end) of the boxes in ``b[start:end]``; stops at a bad size."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", b, pos)
        head = 8
        if size == 1:  # a 64-bit size follows the type
            if pos + 16 > end:
                return
            size, head = struct.unpack_from(">Q", b, pos + 8)[0], 16
        elif size == 0:  # to the end of the enclosing box
            size = end - pos
        if size < head or pos + size > end:
            return
        yield kind, pos + head, pos + size
        pos += size


class _Walk:
    """Counts the boxes a file's walks visit, refusing past ``MAX_BOXES``."""

    def __init__(self, b: bytes) -> None:
        self.b, self.seen = b, 0

    def children(self, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
        for box in boxes(self.b, start, end):
            self.seen += 1
            if self.seen > MAX_BOXES:
                raise Undecodable(f"it has more than {MAX_BOXES} boxes")
            yield box

    def find(self, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
        return next(((s, e) for k, s, e in self.children(start, end) if k == kind), None)


def brand(b: bytes) -> str:
    """``"avif"`` or ``"heic"`` from the ``ftyp`` box's major and compatible brands."""
    (size,) = struct.unpack_from(">I", b, 0)
    brands = {b[i : i + 4] for i in range(16, min(size, len(b)) - 3, 4)} | {b[8:12]}
    if brands & AVIF_BRANDS:
        return "avif"
    if brands & HEIC_BRANDS:
        return "heic"
    raise Undecodable("an HEIF file that is neither AVIF nor HEIC")


def _meta(walk: _Walk) -> tuple[int, int]:
    found = walk.find(0, len(walk.b), b"meta")
    if found is None:
        raise Undecodable("no meta box")
    return found[0] + 4, found[1]  # a full box: version and flags first


def probe(b: bytes) -> tuple[str, int, int]:
    """(format, width, height) declared by the file's boxes."""
    fmt = brand(b)
    walk = _Walk(b)
    width = height = 0
    start, end = _meta(walk)
    for kind in _PROPS:
        found = walk.find(start, end, kind)
        if found is None:
            raise Undecodable("no image properties")
        start, end = found
    for kind, body, stop in walk.children(start, end):
        if kind == b"ispe" and stop - body >= 12:
            w, h = struct.unpack_from(">II", b, body + 4)
            width, height = max(width, w), max(height, h)
    if not width or not height:
        raise Undecodable("no image size")
    return fmt, width, height


def _av1_items(b: bytes, start: int, end: int) -> list[int]:
    """Ids of the ``av01`` items listed in an ``iinf`` box's body."""
    version = b[start]
    pos = start + 4 + (2 if version == 0 else 4)
    ids = []
    for n, (kind, body, stop) in enumerate(boxes(b, pos, end)):
        if n >= MAX_ITEMS:
            raise Undecodable(f"its AVIF lists more than {MAX_ITEMS} items")
        if kind != b"infe" or stop - body < 12 or b[body] < 2:
            continue
        if b[body] == 2:
            (item,) = struct.unpack_from(">H", b, body + 4)
            kind_at = body + 8
        else:
            (item,) = struct.unpack_from(">I", b, body + 4)
            kind_at = body + 10
        if b[kind_at : kind_at + 4] == b"av01":
            ids.append(item)
    return ids


def _locations(b: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """item id -> (construction method, offset of its first extent) from ``iloc``."""
    pos = start

    def num(size: int) -> int:
        nonlocal pos
        if pos + size > end:
            raise Undecodable("its iloc box is truncated")
        value = int.from_bytes(b[pos : pos + size], "big")
        pos += size
        return value

    version = num(1)
    pos += 3
    sizes = num(2)
    offset_size, length_size = sizes >> 12, (sizes >> 8) & 15
    base_size, index_size = (sizes >> 4) & 15, (sizes & 15 if version in (1, 2) else 0)
    out: dict[int, tuple[int, int]] = {}
    count = num(2 if version < 2 else 4)
    if count > MAX_ITEMS:
        raise Undecodable(f"its AVIF locates more than {MAX_ITEMS} items")
    for _ in range(count):
        item = num(2 if version < 2 else 4)
        method = num(2) & 15 if version in (1, 2) else 0
        pos += 2  # data_reference_index
        base = num(base_size)
        extents = num(2)
        for k in range(extents):
            num(index_size)
            offset = num(offset_size)
            num(length_size)
            if k == 0:
                out[item] = (method, base + offset)
    return out


def check_frames(b: bytes, width: int, height: int) -> None:
    """Every AV1 item's largest frame is within ``width`` x ``height`` (see the docstring)."""
    try:
        _check_frames(b, width, height)
    except (struct.error, IndexError):
        raise Undecodable("its AVIF boxes are truncated") from None


def _check_frames(b: bytes, width: int, height: int) -> None:
    walk = _Walk(b)
    if walk.find(0, len(b), b"moov") is not None:
        raise Undecodable("an AVIF image sequence (animated AVIF) is not supported")
    start, end = _meta(walk)
    parts = {k: (s, e) for k, s, e in walk.children(start, end)}
    if b"iinf" not in parts or b"iloc" not in parts:
        raise Undecodable("its AVIF has no item list or item locations")
    locs = _locations(b, *parts[b"iloc"])
    idat = parts.get(b"idat", (0, 0))[0]
    seen = 0
    for item in _av1_items(b, *parts[b"iinf"]):
        method, offset = locs.get(item, (-1, 0))
        if method not in (0, 1):  # 2 (item-relative) is not used for AV1 data
            continue
        size = _sequence_size(b, offset + (idat if method == 1 else 0))
        if size is None:
            continue
        seen += 1
        if size[0] > width or size[1] > height:
            raise OverLimit(
                f"its AV1 data makes frames of up to {size[0]}x{size[1]} "
                f"pixels; its header declares {width}x{height}"
            )
    if not seen:
        raise Undecodable("its AVIF has no AV1 sequence header")


def _sequence_size(b: bytes, pos: int) -> tuple[int, int] | None:
    """The max frame size of the sequence header among the OBUs at ``pos``."""
    for _ in range(MAX_OBUS):
        if pos >= len(b):
            return None
        header = b[pos]
        kind, extension, sized = (header >> 3) & 15, header >> 2 & 1, header >> 1 & 1
        pos += 1 + extension
        length = len(b) - pos
        if sized:
            length, pos = _leb128(b, pos)
        if kind == 1:
            return _max_frame(_Bits(b, pos, min(pos + length, len(b))))
        if not sized:
            return None
        pos += length
    return None


def _leb128(b: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        if pos >= len(b):
            break
        byte = b[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos
    raise Undecodable("its AV1 data has a bad OBU size")


class _Bits:
    def __init__(self, b: bytes, start: int, end: int) -> None:
        self.b, self.pos, self.end = b, start * 8, end * 8

    def f(self, n: int) -> int:
        if self.pos + n > self.end:
            raise Undecodable("its AV1 sequence header is truncated")
        value = 0
        for _ in range(n):
            value = value << 1 | (self.b[self.pos >> 3] >> (7 - (self.pos & 7))) & 1
            self.pos += 1
        return value

    def uvlc(self) -> None:
        zeros = 0
        while not self.f(1):
            zeros += 1
            if zeros >= 32:
                return
        self.f(zeros)


def _max_frame(r: _Bits) -> tuple[int, int]:
    """max_frame_width/height from an AV1 sequence header OBU (AV1 spec 5.5.1)."""
    r.f(3)  # seq_profile
    r.f(1)  # still_picture
    if r.f(1):  # reduced_still_picture_header
        r.f(5)  # seq_level_idx[0]
    else:
        decoder_model, delay_bits = False, 0
        if r.f(1):  # timing_info_present_flag
            r.f(32), r.f(32)  # num_units_in_display_tick, time_scale
            if r.f(1):  # equal_picture_interval
                r.uvlc()
            decoder_model = bool(r.f(1))
            if decoder_model:
                delay_bits = r.f(5) + 1
                r.f(32), r.f(5), r.f(5)
        initial_delay = r.f(1)
        for _ in range(r.f(5) + 1):  # operating points
            r.f(12)  # operating_point_idc
            if r.f(5) > 7:  # seq_level_idx
                r.f(1)  # seq_tier
            if decoder_model and r.f(1):
                r.f(delay_bits), r.f(delay_bits), r.f(1)
            if initial_delay and r.f(1):
                r.f(4)
    width_bits, height_bits = r.f(4) + 1, r.f(4) + 1
    return r.f(width_bits) + 1, r.f(height_bits) + 1
