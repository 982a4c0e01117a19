"""Image files checked before anything decodes them: format, size, and what the data decodes to.

Owns the image-input limits' enforcement (the limits themselves are in
``localllm.config``): ``check_images`` refuses too many images, too many bytes,
an unknown or unsupported format, a truncated header, a declared size over
``MAX_IMAGE_PIXELS`` / ``MAX_IMAGE_SIDE``, more pixels in one request than
``LOCALLLM_MAX_REQUEST_PIXELS``, and data that would make the decoder (stb_image,
in libmtmd) do more than the header says, each with an ``InvalidRequest`` that
names the image.  The daemon calls it to answer 400 early and the runner calls it
again before libmtmd decodes (stb_image would allocate whatever a header claims).

Formats: PNG (IHDR), JPEG (the first SOFn segment), GIF (logical screen), BMP
(the DIB header) are what libmtmd decodes (``DECODABLE``, the runner's formats).
WebP (RIFF/VP8, VP8L, VP8X) and AVIF (an ISOBMFF ``ftyp`` brand, the size from
its ``ispe`` boxes: ``images.heif``) are what the daemon re-encodes first (``TRANSCODED``, see
``localllm.images.convert``): the pinned libmtmd reads neither.  HEIC is recognised
to be refused by name (no library the daemon ships decodes HEVC).  Callers say
which formats they take (``formats``): the daemon and the front ends
``ACCEPTED``, the runner only ``DECODABLE``.

Beyond the header (``images.data``, ``images.heif``): an AVIF's AV1 stream may not make
frames larger than its boxes declare, a PNG's image data must inflate to what its
IHDR implies (stb grows its buffer to whatever the stream inflates to: 2 GiB from a
1x1 header), and a JPEG may hold at most ``MAX_JPEG_SCANS`` scans (stb makes a pass
over every coefficient per scan).  Both walks are one linear pass with a
bounded buffer; the headers of all of a request's images are checked, and their
pixels counted, before any image data is inflated.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from localllm import config
from localllm.errors import InvalidRequest
from localllm.images import data as imagedata, heif as imageheif

DECODABLE = ("png", "jpeg", "gif", "bmp")  # what libmtmd (stb_image) decodes
TRANSCODED = ("webp", "avif")  # what the daemon decodes with Pillow and re-encodes
ACCEPTED = DECODABLE + TRANSCODED
_NAMES = {"png": "PNG", "jpeg": "JPEG", "gif": "GIF", "bmp": "BMP", "webp": "WebP", "avif": "AVIF"}
_JPEG_SOF = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)


@dataclass(frozen=True)
class ImageInfo:
    format: str  # "png", "jpeg", "gif", "bmp", "webp", "avif", "heic"
    width: int
    height: int


class BadImage(ValueError):
    """The bytes are not an image this module can read (the message says why)."""


class UnknownFormat(BadImage):
    """The bytes start like no format this module knows."""


def _png(b: bytes) -> ImageInfo:
    if len(b) < 24 or b[12:16] != b"IHDR":
        raise BadImage("truncated or corrupt PNG")
    w, h = struct.unpack_from(">II", b, 16)
    return ImageInfo("png", w, h)


def _jpeg(b: bytes) -> ImageInfo:
    try:
        for marker, i, length in imagedata.jpeg_segments(b):
            if marker == 0xDA:  # a scan before any frame header
                break
            if marker in _JPEG_SOF:
                if i + 9 > len(b) or length < 7:
                    break
                h, w = struct.unpack_from(">HH", b, i + 5)
                return ImageInfo("jpeg", w, h)
    except (imagedata.OverLimit, imagedata.Undecodable) as exc:
        raise BadImage(str(exc)) from None
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


def _heif(b: bytes) -> ImageInfo:
    try:
        fmt, width, height = imageheif.probe(b)
    except (imagedata.Undecodable, struct.error) as exc:
        raise BadImage(f"corrupt HEIF file ({exc})") from None
    return ImageInfo(fmt, width, height)


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
    if data[4:8] == b"ftyp" and len(data) >= 16:
        return _heif(data)
    raise UnknownFormat("not a PNG, JPEG, GIF, BMP, WebP or AVIF file")


def _names(formats: Sequence[str]) -> str:
    names = [_NAMES[f] for f in formats]
    return f"{', '.join(names[:-1])} or {names[-1]}"


def check_header(data: bytes, index: int = 0, formats: Sequence[str] = DECODABLE) -> ImageInfo:
    """One image's bytes and header, or ``InvalidRequest`` naming image ``index`` (0-based).

    ``formats``: those the caller can use (``DECODABLE`` for libmtmd, ``ACCEPTED``
    where ``images.convert`` runs first)."""
    what = f"image {index + 1}"
    if not data:
        raise InvalidRequest(f"{what} is empty")
    if len(data) > config.MAX_IMAGE_BYTES:
        raise InvalidRequest(
            f"{what} is {len(data)} bytes; the limit is {config.MAX_IMAGE_BYTES} bytes"
        )
    try:
        info = probe(data)
    except UnknownFormat:
        raise InvalidRequest(f"{what}: not a {_names(formats)} file") from None
    except BadImage as exc:
        raise InvalidRequest(f"{what}: {exc}") from None
    if info.format not in formats:
        raise InvalidRequest(
            f"{what}: {info.format.upper()} images are not supported (send {_names(formats)})"
        )
    if info.width <= 0 or info.height <= 0:
        raise InvalidRequest(f"{what}: corrupt header ({info.width}x{info.height} pixels)")
    if (
        max(info.width, info.height) > config.MAX_IMAGE_SIDE
        or info.width * info.height > config.MAX_IMAGE_PIXELS
    ):
        raise InvalidRequest(
            f"{what} is {info.width}x{info.height} pixels; the limit is "
            f"{config.MAX_IMAGE_PIXELS // 1_000_000} megapixels and "
            f"{config.MAX_IMAGE_SIDE} pixels a side"
        )
    return info


def check_data(data: bytes, info: ImageInfo, index: int = 0) -> None:
    """The image's data decodes to what its header declares (``images.data``), or
    ``InvalidRequest`` naming image ``index``.  Costs a pass over the data (a PNG's is
    inflated), so it comes after every cheaper check."""
    checks: dict[str, Callable[[bytes], object]] = {
        "png": imagedata.check_png,
        "jpeg": imagedata.check_jpeg,
        "avif": lambda d: imageheif.check_frames(d, info.width, info.height),
    }
    check = checks.get(info.format)
    if check is None:
        return
    try:
        check(data)
    except imagedata.Undecodable as exc:
        raise InvalidRequest(f"image {index + 1} could not be decoded: {exc}") from None
    except imagedata.OverLimit as exc:
        raise InvalidRequest(f"image {index + 1}: {exc}") from None


def check_image(data: bytes, index: int = 0, formats: Sequence[str] = DECODABLE) -> ImageInfo:
    """One image checked (header, then data), or ``InvalidRequest`` naming image ``index``.

    WebP and AVIF data is checked by decoding it (``images.convert``), not here."""
    info = check_header(data, index, formats)
    check_data(data, info, index)
    return info


def check_images(images: Sequence[bytes], formats: Sequence[str] = DECODABLE) -> list[ImageInfo]:
    """Every image of one request checked; their infos in order.

    Count and bytes, every header, the request's pixels together
    (``LOCALLLM_MAX_REQUEST_PIXELS``), and only then each image's data, so a request
    refused for its size costs no inflating."""
    if len(images) > config.MAX_IMAGES:
        raise InvalidRequest(
            f"{len(images)} images in one request; the limit is {config.MAX_IMAGES}"
        )
    total = sum(len(b) for b in images)
    if total > config.MAX_IMAGES_BYTES:
        raise InvalidRequest(
            f"the request's images take {total} bytes; the limit is "
            f"{config.MAX_IMAGES_BYTES} bytes together"
        )
    infos = [check_header(b, i, formats) for i, b in enumerate(images)]
    pixels = sum(info.width * info.height for info in infos)
    cap = config.MAX_REQUEST_PIXELS.get()
    if pixels > cap:
        raise InvalidRequest(
            f"the request's images hold {pixels} pixels together "
            f"({', '.join(f'{i.width}x{i.height}' for i in infos)}); the limit is {cap} "
            "pixels a request (LOCALLLM_MAX_REQUEST_PIXELS)"
        )
    for i, (data, info) in enumerate(zip(images, infos, strict=True)):
        check_data(data, info, i)
    return infos
