"""WebP and AVIF in: checked from their headers and boxes, decoded by Pillow, PNG out.

``images.convert.prepare`` is what the daemon runs on a request's images;
``images.heif`` reads an AVIF's boxes and AV1 sequence headers.  The images are made
with Pillow (the encoders clients use), the hostile ones by editing real files.
The daemon end to end is in test_vision_api.py.
"""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from localllm import config
from localllm.errors import InvalidRequest
from localllm.images import convert as imageconvert, heif as imageheif
from localllm.images.convert import prepare
from localllm.images.info import ACCEPTED, check_header, check_images, probe
from tests.support.visionmodel import png


def encode(im: Image.Image, fmt: str, **kw: object) -> bytes:
    out = io.BytesIO()
    im.save(out, fmt, **kw)
    return out.getvalue()


def decoded(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


RED = Image.new("RGB", (32, 24), (255, 0, 0))
WEBP_LOSSLESS = encode(RED, "WEBP", lossless=True)
WEBP_LOSSY = encode(RED, "WEBP", quality=90)
AVIF = encode(RED, "AVIF", quality=90)


def chunk(kind: bytes, data: bytes) -> bytes:
    return kind + struct.pack("<I", len(data)) + data + b"\0" * (len(data) % 2)


def riff(*chunks: bytes) -> bytes:
    body = b"WEBP" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def vp8x(width: int, height: int) -> bytes:
    return chunk(
        b"VP8X", bytes(4) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )


def with_ispe(data: bytes, width: int, height: int) -> bytes:
    """``data`` with every ``ispe`` box saying ``width`` x ``height``."""
    out, at = bytearray(data), data.find(b"ispe")
    while at >= 0:
        out[at + 8 : at + 16] = struct.pack(">II", width, height)
        at = data.find(b"ispe", at + 4)
    return bytes(out)


@pytest.mark.parametrize(
    "data,fmt", [(WEBP_LOSSLESS, "webp"), (WEBP_LOSSY, "webp"), (AVIF, "avif")]
)
def test_webp_and_avif_become_pngs_of_the_same_pixels(data: bytes, fmt: str) -> None:
    info = probe(data)
    assert (info.format, info.width, info.height) == (fmt, 32, 24)
    (out,) = prepare([data])
    im = decoded(out)
    assert (im.format, im.mode, im.size) == ("PNG", "RGB", (32, 24))
    r, g, b = im.getpixel((5, 5))  # type: ignore[misc]
    assert r > 250 and g < 5 and b < 5  # lossy codecs may move a level or two
    assert out == prepare([data])[0]  # the same bytes each time: the prefix cache's key


def test_what_libmtmd_reads_passes_through_as_the_same_bytes() -> None:
    image = png(8, 8)
    assert prepare([image])[0] is image


def test_transparency_is_laid_on_white_and_an_animation_gives_its_first_frame() -> None:
    clear = encode(Image.new("RGBA", (8, 8), (0, 0, 0, 0)), "WEBP", lossless=True)
    assert decoded(prepare([clear])[0]).getpixel((1, 1)) == (255, 255, 255)
    half = encode(Image.new("RGBA", (8, 8), (0, 0, 0, 128)), "AVIF", quality=100)
    assert decoded(prepare([half])[0]).getpixel((1, 1)) == pytest.approx((127, 127, 127), abs=3)
    frames = [Image.new("RGB", (16, 16), c) for c in ((0, 255, 0), (255, 0, 0))]
    animated = encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    assert decoded(prepare([animated])[0]).getpixel((1, 1)) == (0, 255, 0)


def test_a_photo_too_big_as_png_goes_as_jpeg(monkeypatch: pytest.MonkeyPatch) -> None:
    noise = Image.effect_noise((256, 256), 40).convert("RGB")
    webp = encode(noise, "WEBP", quality=90)
    as_png, as_jpeg = len(prepare([webp])[0]), len(encode(noise, "JPEG", quality=95))
    assert as_jpeg < as_png
    monkeypatch.setattr(config, "MAX_IMAGE_BYTES", (as_png + as_jpeg) // 2)
    out = prepare([webp])[0]
    assert decoded(out).format == "JPEG" and len(out) < as_png
    assert as_jpeg > len(webp)
    monkeypatch.setattr(config, "MAX_IMAGE_BYTES", len(webp))  # the WebP itself fits
    with pytest.raises(
        InvalidRequest,
        match=r"image 1 \(256x256 pixels\) is over \d+ bytes "
        r"even as a JPEG of quality 95",
    ):
        prepare([webp])


def test_re_encoded_images_share_the_request_byte_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    small = encode(Image.effect_noise((64, 64), 40).convert("RGB"), "WEBP", quality=50)
    grown = len(prepare([small])[0])
    assert grown > 2 * len(small)
    monkeypatch.setattr(config, "MAX_IMAGES_BYTES", 4 * grown - 1)
    with pytest.raises(
        InvalidRequest,
        match=r"the request's images take \d+ bytes once "
        r"re-encoded for the model; the limit is \d+",
    ):
        prepare([small] * 4)


def test_corrupt_and_lying_webps_are_refused() -> None:
    with pytest.raises(InvalidRequest, match=r"image 2 could not be decoded \(WebP: "):
        prepare([WEBP_LOSSLESS, WEBP_LOSSLESS[:30] + bytes(40)])
    with pytest.raises(InvalidRequest, match=r"image 1: truncated or corrupt WebP"):
        prepare([WEBP_LOSSLESS[:20]])
    # A bomb: 34 bytes that declare a 16383x16383 canvas (268 megapixels, 1 GiB decoded).
    bomb = encode(Image.new("RGB", (16383, 16383)), "WEBP", lossless=True, method=0)
    assert len(bomb) < 100
    with pytest.raises(
        InvalidRequest,
        match=r"image 1 is 16383x16383 pixels; the limit is "
        r"50 megapixels",
    ):
        prepare([bomb])
    # The same stream under a container that declares one pixel: libwebp refuses the
    # mismatch before allocating anything.
    with pytest.raises(InvalidRequest, match=r"image 1 could not be decoded"):
        prepare([riff(vp8x(1, 1), bomb[12:])])
    # Declared sizes count towards the request's pixels before anything decodes.
    big = encode(Image.new("RGB", (7000, 6000)), "WEBP", lossless=True, method=0)
    with pytest.raises(InvalidRequest, match=r"the request's images hold 126000000 pixels"):
        prepare([big, big, big])


def test_an_avif_whose_stream_is_larger_than_its_boxes_is_refused_before_decoding() -> None:
    # 4 KB that libavif would decode into 16000x16000 (half a gigabyte), under boxes
    # that say 64x48.
    lie = with_ispe(encode(Image.new("RGB", (4000, 4000)), "AVIF", speed=10), 64, 48)
    assert probe(lie).width == 64
    with pytest.raises(
        InvalidRequest,
        match=r"image 1: its AV1 data makes frames of up to "
        r"4000x4000 pixels; its header declares 64x48",
    ):
        prepare([lie])
    assert prepare([with_ispe(AVIF, 40, 30)])  # larger boxes than the stream: harmless


@pytest.mark.parametrize(
    "data,message",
    [
        (AVIF[:40], r"image 1: corrupt HEIF file \(no meta box\)"),
        (
            AVIF.replace(b"av1C", b"xxxx").replace(b"av01", b"xxxx"),
            r"image 1 could not be decoded: its AVIF has no AV1 sequence header",
        ),
        (
            AVIF.replace(b"avif", b"heic"),
            r"image 1: HEIC images are not supported \(send PNG, "
            r"JPEG, GIF, BMP, WebP or AVIF\)",
        ),
        (
            AVIF[:8] + b"mif1" + AVIF[12:].replace(b"avif", b"mif1"),
            r"an HEIF file that is neither AVIF nor HEIC",
        ),
        (AVIF + struct.pack(">I4s", 16, b"moov") + bytes(8), r"animated AVIF\) is not supported"),
    ],
)
def test_bad_avifs_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        prepare([data])


def test_the_runner_takes_only_what_libmtmd_reads() -> None:
    with pytest.raises(
        InvalidRequest,
        match=r"WEBP images are not supported \(send PNG, "
        r"JPEG, GIF or BMP\)",
    ):
        check_images([WEBP_LOSSLESS])
    assert check_header(WEBP_LOSSLESS, 0, ACCEPTED).format == "webp"


def test_pillows_own_guard_is_set_from_our_limit() -> None:
    assert imageconvert._pillow().MAX_IMAGE_PIXELS == config.MAX_IMAGE_PIXELS


class Bits:
    def __init__(self) -> None:
        self.bits: list[int] = []

    def put(self, value: int, n: int) -> Bits:
        self.bits += [(value >> (n - 1 - i)) & 1 for i in range(n)]
        return self

    def obu(self) -> bytes:
        bits = self.bits + [0] * (-len(self.bits) % 8)
        payload = bytes(int("".join(map(str, bits[i : i + 8])), 2) for i in range(0, len(bits), 8))
        return bytes([0x0A, len(payload)]) + payload  # OBU_SEQUENCE_HEADER, sized


def test_a_full_sequence_header_is_read_past_its_timing_and_operating_points() -> None:
    # Profile 0, not still: timing info with a decoder model, two operating points
    # (one with a tier bit, decoder-model and display-delay fields), then the sizes.
    b = Bits().put(0, 3).put(0, 1).put(0, 1)
    b.put(1, 1).put(1000, 32).put(30000, 32).put(1, 1).put(0b00101, 5)  # uvlc: 4
    b.put(1, 1).put(9, 5).put(1, 32).put(3, 5).put(3, 5)  # decoder model, delays of 10 bits
    b.put(1, 1).put(1, 5)  # initial display delay; 2 operating points
    b.put(0x101, 12).put(9, 5).put(1, 1).put(1, 1).put(5, 10).put(6, 10).put(0, 1)
    b.put(1, 1).put(3, 4)
    b.put(0, 12).put(4, 5).put(0, 1).put(0, 1)
    b.put(11, 4).put(11, 4).put(3839, 12).put(2159, 12)  # 3840x2160
    assert imageheif._sequence_size(b.obu(), 0) == (3840, 2160)
    # A temporal delimiter first (type 2, empty) is skipped.
    assert imageheif._sequence_size(b"\x12\x00" + b.obu(), 0) == (3840, 2160)
    reduced = Bits().put(0, 3).put(1, 1).put(1, 1).put(8, 5).put(5, 4).put(5, 4)
    reduced.put(39, 6).put(29, 6)
    assert imageheif._sequence_size(reduced.obu(), 0) == (40, 30)
