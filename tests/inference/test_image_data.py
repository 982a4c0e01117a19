"""Image data checked against what stb_image would do with it (issue 26): PNG inflate
bombs, JPEG scan storms, and the pixels of a whole request.

Every bomb is built here, a few KB each: a 1x1 PNG whose IDAT inflates to 16 MiB,
a progressive JPEG (libjpeg-turbo's own, below) with thousands of repeated scans,
tens of thousands of chunks or segments.  Each is refused with a 400 that names the
image, fast, and holding little memory; valid files of every PNG colour type, bit
depth and interlace method, and the encoder's JPEG, pass.
"""

from __future__ import annotations

import base64
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable

import pytest

from localllm import config
from localllm.errors import InvalidRequest
from localllm.images import data as imagedata
from localllm.images.data import MAX_JPEG_SCANS, MAX_PNG_CHUNKS, PNG_SLACK, png_data_size
from localllm.images.info import check_image, check_images
from localllm.inference.images import prompt_images
from tests.support.images import (
    PROGRESSIVE_JPEG,
    chunk,
    header_only,
    make_png,
    scans,
    with_scans,
    zeros,
)
from tests.support.visionmodel import RED, png


def refused(data: bytes, words: str) -> InvalidRequest:
    with pytest.raises(InvalidRequest, match=words) as info:
        check_images([data])
    return info.value


def peak_alloc(fn: Callable[[], object]) -> int:
    """The most memory Python held at once while ``fn`` ran."""
    tracemalloc.start()
    try:
        fn()
    except InvalidRequest:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_a_1x1_png_that_inflates_to_16_mib_is_refused_holding_one_step() -> None:
    bomb = make_png(1, 1, zeros(16 << 20))
    assert len(bomb) < 20_000
    start = time.process_time()
    exc = refused(
        bomb,
        r"image 1: its PNG data inflates to more than the 4 bytes its 1x1 "
        r"pixels need \(a decompression bomb\)",
    )
    assert time.process_time() - start < 0.5
    assert peak_alloc(lambda: check_images([bomb])) < 3 * imagedata.INFLATE_STEP
    # The daemon's message names the image as the request does.
    with pytest.raises(InvalidRequest, match="image 2: its PNG data inflates"):
        prompt_images("x", [base64.b64encode(png(4, 4)).decode(), base64.b64encode(bomb).decode()])
    assert "1x1" in str(exc)


def test_a_bomb_split_over_many_idat_chunks_and_a_one_byte_header_chunk() -> None:
    data = zeros(4 << 20)
    pieces = [data[:1], data[1:2]] + [data[k : k + 97] for k in range(2, len(data), 97)]
    assert len(pieces) > 40
    refused(make_png(8, 8, pieces), "decompression bomb")
    exact = zlib.compress(bytes(8 * (1 + 24)))
    check_images([make_png(8, 8, [exact[:1], exact[1:3], exact[3:]])])


@pytest.mark.parametrize(
    ("colour", "depth"),
    [
        (0, 1),
        (0, 2),
        (0, 4),
        (0, 8),
        (0, 16),
        (2, 8),
        (2, 16),
        (3, 1),
        (3, 2),
        (3, 4),
        (3, 8),
        (4, 8),
        (4, 16),
        (6, 8),
        (6, 16),
    ],
)
@pytest.mark.parametrize("interlace", [0, 1])
def test_every_valid_layout_passes_and_one_byte_off_does_not(
    colour: int, depth: int, interlace: int
) -> None:
    for w, h in ((1, 1), (3, 5), (13, 7), (17, 9)):
        need = png_data_size(w, h, depth, colour, interlace)

        def made(n: int, w: int = w, h: int = h) -> bytes:
            return make_png(
                w, h, zlib.compress(bytes(n)), depth=depth, colour=colour, interlace=interlace
            )

        check_images([made(need)])
        check_images([made(need + PNG_SLACK)])  # trailing data stb (and libpng) accept
        refused(made(need + PNG_SLACK + 1), "decompression bomb")
        refused(
            made(need - 1),
            f"image 1 could not be decoded: its PNG data inflates to {need - 1} bytes",
        )


def test_adam7_sums_its_seven_passes() -> None:
    # 8x8, 8-bit grey: passes of 1x1, 1x1, 2x1, 2x2, 4x2, 4x4, 8x4 pixels, each row
    # with its filter byte.
    assert png_data_size(8, 8, 8, 0, 1) == (2 + 2 + 3 + 2 * 3 + 2 * 5 + 4 * 5 + 4 * 9)
    # A 1x1 image is all first pass; a 5x1 RGB row spreads over passes 1, 2, 4 (one
    # pixel each) and 6 (two), and passes 3, 5 and 7 have no rows.
    assert png_data_size(1, 1, 8, 2, 1) == 4
    assert png_data_size(5, 1, 8, 2, 1) == (1 + 3) + (1 + 3) + (1 + 3) + (1 + 6)


def test_corrupt_truncated_and_odd_pngs_are_undecodable() -> None:
    good = zlib.compress(bytes(4 * (1 + 12)))
    refused(make_png(4, 4, good[:-6]), "could not be decoded: its PNG data is truncated")
    refused(make_png(4, 4, b"\x00\x00" + good[2:]), "not a zlib stream")
    refused(
        make_png(4, 4, good[:2] + b"\xff" * 20), "could not be decoded: its PNG data is corrupt"
    )
    refused(make_png(4, 4, good)[:-12], "truncated")  # no IEND
    refused(make_png(4, 4, good, extra=chunk(b"ABCD", b"")), "unknown critical chunk")
    refused(make_png(4, 4, good, depth=3), "header is invalid")
    refused(make_png(4, 4, good, colour=5), "header is invalid")
    refused(make_png(4, 4, good, interlace=2), "header is invalid")


def test_a_huge_number_of_chunks_is_refused_in_milliseconds() -> None:
    filler = chunk(b"tEXt", b"") * (MAX_PNG_CHUNKS + 10)
    data = make_png(4, 4, zlib.compress(bytes(4 * 13)), extra=filler)
    start = time.process_time()
    refused(data, f"more than {MAX_PNG_CHUNKS} PNG chunks")
    assert time.process_time() - start < 0.5


def test_compressed_chunks_stb_never_inflates_are_not_inflated() -> None:
    # iCCP, zTXt and APNG frame (fdAT) bombs: stb_image skips ancillary chunks unread
    # (of an APNG it decodes the default image, the IDAT), and so do we.
    bomb = zeros(64 << 20)
    extra = (
        chunk(b"iCCP", b"p\x00\x00" + bomb)
        + chunk(b"zTXt", b"k\x00\x00" + bomb)
        + chunk(b"acTL", struct.pack(">II", 2, 0))
        + chunk(b"fdAT", struct.pack(">I", 1) + bomb)
    )
    data = make_png(4, 4, zlib.compress(bytes(4 * 13)), extra=extra)
    start = time.process_time()
    assert check_image(data).width == 4
    assert time.process_time() - start < 0.1


def test_a_real_progressive_jpeg_passes() -> None:
    assert len(scans(PROGRESSIVE_JPEG)) == 10
    assert PROGRESSIVE_JPEG.count(b"\xff\xd0") > 0  # restart markers inside its scans
    info = check_image(PROGRESSIVE_JPEG)
    assert (info.format, info.width, info.height) == ("jpeg", 64, 48)
    check_images([with_scans(MAX_JPEG_SCANS)])


def test_a_jpeg_scan_storm_is_refused_in_one_linear_pass() -> None:
    refused(
        with_scans(MAX_JPEG_SCANS + 1), f"image 1: its JPEG has more than {MAX_JPEG_SCANS} scans"
    )
    storm = with_scans(20_000)
    start = time.process_time()
    refused(storm, "scans")
    assert time.process_time() - start < 0.2


def test_only_real_markers_count_as_scans() -> None:
    # Inside a scan: a stuffed 0xFF (FF 00) then DA, restarts (FF D0-D7) and their
    # runs are data, not scans; fill bytes (FF FF ... DA) before a marker are a marker.
    first = scans(PROGRESSIVE_JPEG)[0]
    sos_len = struct.unpack_from(">H", PROGRESSIVE_JPEG, first + 2)[0]
    data_at = first + 2 + sos_len
    hidden = b"\xff\x00\xda\x00\x0c" * 3 + b"\xff\xd3\xff\xd4" * 50
    padded = PROGRESSIVE_JPEG[:data_at] + hidden + PROGRESSIVE_JPEG[data_at:]
    check_images(
        [
            padded[:-2]
            + PROGRESSIVE_JPEG[scans(PROGRESSIVE_JPEG)[-1] : -2] * (MAX_JPEG_SCANS - 10)
            + b"\xff\xd9"
        ]
    )
    filled = with_scans(MAX_JPEG_SCANS + 1).replace(b"\xff\xda", b"\xff\xff\xff\xda")
    refused(filled, "scans")


def test_the_jpeg_walk_is_linear_on_stuffing_fill_and_segments() -> None:
    first = scans(PROGRESSIVE_JPEG)[0]
    at = first + 2 + struct.unpack_from(">H", PROGRESSIVE_JPEG, first + 2)[0]
    for filler in (b"\xff\x00", b"\xff\xd0", b"\x00"):
        data = PROGRESSIVE_JPEG[:at] + filler * (4 << 20) + PROGRESSIVE_JPEG[at:]
        start = time.process_time()
        check_image(data)
        assert time.process_time() - start < 0.3, filler
    # A run of fill bytes between segments, and a storm of empty comment segments.
    fill = PROGRESSIVE_JPEG[:2] + b"\xff" * (8 << 20) + PROGRESSIVE_JPEG[2:]
    start = time.process_time()
    check_image(fill)
    assert time.process_time() - start < 0.3
    comments = PROGRESSIVE_JPEG[:2] + b"\xff\xfe\x00\x02" * 100_000 + PROGRESSIVE_JPEG[2:]
    start = time.process_time()
    refused(comments, "more than 4096 segments")
    assert time.process_time() - start < 0.1


def test_a_request_is_capped_by_its_pixels_together(monkeypatch: pytest.MonkeyPatch) -> None:
    images = [header_only(8000, 5000)] * 3  # 40 megapixels each, each under the limit
    with pytest.raises(
        InvalidRequest,
        match=r"the request's images hold 120000000 pixels "
        r"together \(8000x5000, 8000x5000, 8000x5000\); "
        r"the limit is 100000000 pixels a request "
        r"\(LOCALLLM_MAX_REQUEST_PIXELS\)",
    ):
        check_images(images)
    check_images([png(32, 32, RED)] * 16)  # the default leaves room for ordinary requests
    monkeypatch.setenv("LOCALLLM_MAX_REQUEST_PIXELS", "3000")
    check_images([png(32, 32, RED)] * 2)
    with pytest.raises(InvalidRequest, match="limit is 3000 pixels a request"):
        check_images([png(32, 32, RED)] * 3)
    assert config.MAX_REQUEST_PIXELS.get() == 3000
