"""Image files checked from their headers: format and size, before anything is decoded.

Owns the image-input limits' enforcement (the limits themselves are constants in
``localllm.config``): ``check_images`` refuses too many images, too many bytes,
an unknown or unsupported format, a truncated header, and a declared size
over ``MAX_IMAGE_PIXELS`` / ``MAX_IMAGE_SIDE``, each with an ``InvalidRequest``
that names the image.  Pure and cheap (it reads a few header bytes), so the
daemon calls it to answer 400 early and the runner calls it again before
libmtmd decodes (stb_image would allocate whatever a header claims).

Formats: PNG (IHDR), JPEG (the first SOFn segment), GIF (logical screen), BMP
(the DIB header) are decodable; WebP is recognised (RIFF/VP8, VP8L, VP8X) but
refused, since the pinned libmtmd decodes it only through ffmpeg.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from localllm import config
from localllm.errors import InvalidRequest

DECODABLE = ("png", "jpeg", "gif", "bmp")
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB,
                       0xCD, 0xCE, 0xCF})


@dataclass(frozen=True)
class ImageInfo:
    format: str  # "png", "jpeg", "gif", "bmp", "webp"
    width: int
    height: int


class BadImage(ValueError):
    """The bytes are not an image this module can read (the message says why)."""


def _u16be(b: bytes, i: int) -> int:
    return int(struct.unpack_from(">H", b, i)[0])


def _png(b: bytes) -> ImageInfo:
    if len(b) < 24 or b[12:16] != b"IHDR":
        raise BadImage("truncated or corrupt PNG")
    w, h = struct.unpack_from(">II", b, 16)
    return ImageInfo("png", w, h)


def _jpeg(b: bytes) -> ImageInfo:
    i = 2
    while i + 4 <= len(b):
        if b[i] != 0xFF:
            raise BadImage("corrupt JPEG")
        marker = b[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # no length field
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image / start of scan before any frame header
            break
        length = _u16be(b, i + 2)
        if marker in _JPEG_SOF:
            if i + 9 > len(b) or length < 7:
                break
            h, w = struct.unpack_from(">HH", b, i + 5)
            return ImageInfo("jpeg", w, h)
        i += 2 + length
    raise BadImage("truncated or corrupt JPEG (no frame header)")


def _gif(b: bytes) -> ImageInfo:
    if len(b) < 10:
        raise BadImage("truncated GIF")
    w, h = struct.unpack_from("<HH", b, 6)
    return ImageInfo("gif", w, h)


def _bmp(b: bytes) -> ImageInfo:
    if len(b) < 26:
        raise BadImage("truncated BMP")
    (dib,) = struct.unpack_from("<I", b, 14)
    if dib == 12:
        w, h = struct.unpack_from("<HH", b, 18)
    else:
        w, h = struct.unpack_from("<ii", b, 18)
    return ImageInfo("bmp", abs(w), abs(h))


def _webp(b: bytes) -> ImageInfo:
    kind = b[12:16]
    if kind == b"VP8X" and len(b) >= 30:
        w = int.from_bytes(b[24:27], "little") + 1
        h = int.from_bytes(b[27:30], "little") + 1
    elif kind == b"VP8L" and len(b) >= 25:
        bits = int.from_bytes(b[21:25], "little")
        w, h = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif kind == b"VP8 " and len(b) >= 30:
        w = int.from_bytes(b[26:28], "little") & 0x3FFF
        h = int.from_bytes(b[28:30], "little") & 0x3FFF
    else:
        raise BadImage("truncated or corrupt WebP")
    return ImageInfo("webp", w, h)


def probe(data: bytes) -> ImageInfo:
    """Format and declared size from the header; ``BadImage`` when it cannot tell."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return _gif(data)
    if data.startswith(b"BM"):
        return _bmp(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    raise BadImage("not a PNG, JPEG, GIF or BMP file")


def check_image(data: bytes, index: int = 0) -> ImageInfo:
    """One image's header, or ``InvalidRequest`` naming image ``index`` (0-based)."""
    what = f"image {index + 1}"
    if not data:
        raise InvalidRequest(f"{what} is empty")
    if len(data) > config.MAX_IMAGE_BYTES:
        raise InvalidRequest(f"{what} is {len(data)} bytes; the limit is "
                             f"{config.MAX_IMAGE_BYTES} bytes")
    try:
        info = probe(data)
    except BadImage as exc:
        raise InvalidRequest(f"{what}: {exc}") from None
    if info.format not in DECODABLE:
        raise InvalidRequest(f"{what}: {info.format.upper()} images are not supported "
                             "(send PNG, JPEG, GIF or BMP)")
    if info.width <= 0 or info.height <= 0:
        raise InvalidRequest(f"{what}: corrupt header ({info.width}x{info.height} pixels)")
    if (max(info.width, info.height) > config.MAX_IMAGE_SIDE
            or info.width * info.height > config.MAX_IMAGE_PIXELS):
        raise InvalidRequest(
            f"{what} is {info.width}x{info.height} pixels; the limit is "
            f"{config.MAX_IMAGE_PIXELS // 1_000_000} megapixels and "
            f"{config.MAX_IMAGE_SIDE} pixels a side")
    return info


def check_images(images: Sequence[bytes]) -> list[ImageInfo]:
    """Every image of one request checked (count, bytes, headers); their infos in order."""
    if len(images) > config.MAX_IMAGES:
        raise InvalidRequest(f"{len(images)} images in one request; the limit is "
                             f"{config.MAX_IMAGES}")
    total = sum(len(b) for b in images)
    if total > config.MAX_IMAGES_BYTES:
        raise InvalidRequest(f"the request's images take {total} bytes; the limit is "
                             f"{config.MAX_IMAGES_BYTES} bytes together")
    return [check_image(b, i) for i, b in enumerate(images)]
