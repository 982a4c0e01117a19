"""WebP and AVIF images re-encoded as PNG (or JPEG) for libmtmd, which reads neither.

Owns the one place the daemon decodes pixels: ``prepare`` checks a request's images
(``images.info.check_images`` with ``ACCEPTED``: count, bytes, every header's declared
size, the request's pixels together, and a PNG's or JPEG's data) and then turns
each WebP or AVIF into a PNG of the same pixels; PNG, JPEG, GIF and BMP pass through
as the same bytes (the runner's prefix cache keys images by their hash).

Decoding is Pillow's (libwebp, libavif): the library clients' own screenshots and
phone pictures are made with, kept up to date by its maintainers, wheels for every
platform.  Its guard is set from our limits (``Image.MAX_IMAGE_PIXELS``), but ours
come first: the declared size is checked from the header before Pillow sees the
bytes, and again from what Pillow's parser reports before any pixel is decoded (a
WebP's canvas and its frame, an AVIF's ``ispe`` boxes and its image, must agree).
Only the first frame of an animation is used, as stb_image does with a GIF.

The output: transparent pixels are laid on white (what a page shows; libmtmd would
otherwise see whatever colour the encoder left under them), then PNG at zlib level 1
(the bytes only travel down a local pipe).  A photo's PNG can pass
``MAX_IMAGE_BYTES``; the write stops there and the image goes as a JPEG of quality
95 instead (a lossy source loses nothing a vision encoder resizing to a few hundred
pixels can see).  Callers run this off the event loop (it is seconds of CPU for a
large image): the plan's build step and ``Images.resolve`` run in worker threads.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from localllm import config
from localllm.errors import InvalidRequest
from localllm.images.info import ACCEPTED, TRANSCODED, ImageInfo, check_images

PNG_LEVEL = 1  # zlib level: level 6 costs twice the time for a tenth fewer bytes
JPEG_QUALITY = 95
_PILLOW_FORMATS = {"webp": "WEBP", "avif": "AVIF"}


class _TooBig(Exception):
    """The encoded image passed ``MAX_IMAGE_BYTES``: stop writing it."""


class _Capped(io.BytesIO):
    def write(self, data: Any) -> int:
        n = super().write(data)
        if self.tell() > config.MAX_IMAGE_BYTES:
            raise _TooBig
        return n


def _pillow() -> Any:
    """Pillow's Image module, its bomb guard set from our limit (imported on first use)."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = config.MAX_IMAGE_PIXELS
    return Image


def _decode(data: bytes, info: ImageInfo, what: str) -> Any:
    """The first frame's pixels, as RGB; ``InvalidRequest`` for data that does not decode
    or decodes to more than its header declared."""
    image_mod = _pillow()
    fmt = info.format.upper() if info.format != "webp" else "WebP"
    try:
        im = image_mod.open(io.BytesIO(data), formats=[_PILLOW_FORMATS[info.format]])
        # The parser has read the container, not the pixels: hold it to the header.
        w, h = im.size
        if w * h > info.width * info.height or max(w, h) > max(info.width, info.height):
            raise InvalidRequest(
                f"{what}: its {fmt} data holds a {w}x{h} image; its "
                f"header declares {info.width}x{info.height}"
            )
        im.load()
        return _flatten(im, image_mod)
    except InvalidRequest:
        raise
    except image_mod.DecompressionBombError as exc:
        raise InvalidRequest(f"{what}: {exc}") from None
    except (OSError, ValueError, SyntaxError, EOFError, RuntimeError, MemoryError) as exc:
        raise InvalidRequest(f"{what} could not be decoded ({fmt}: {exc})") from None


def _flatten(im: Any, image_mod: Any) -> Any:
    """RGB, with any transparency laid on white."""
    if im.mode == "RGB":
        return im
    if "A" in im.mode or "transparency" in im.info:
        rgba = im.convert("RGBA")
        back = image_mod.new("RGBA", rgba.size, (255, 255, 255, 255))
        return image_mod.alpha_composite(back, rgba).convert("RGB")
    return im.convert("RGB")


def encode(rgb: Any, what: str) -> bytes:
    """PNG bytes of ``rgb``, or JPEG ones when the PNG would pass ``MAX_IMAGE_BYTES``."""
    for fmt, kw in (("PNG", {"compress_level": PNG_LEVEL}), ("JPEG", {"quality": JPEG_QUALITY})):
        out = _Capped()
        try:
            rgb.save(out, fmt, **kw)
        except _TooBig:
            continue
        return out.getvalue()
    raise InvalidRequest(
        f"{what} ({rgb.width}x{rgb.height} pixels) is over "
        f"{config.MAX_IMAGE_BYTES} bytes even as a JPEG of quality "
        f"{JPEG_QUALITY}; send a smaller one"
    )


def transcode(data: bytes, info: ImageInfo, index: int = 0) -> bytes:
    """One WebP or AVIF image (its header already checked) as PNG or JPEG bytes."""
    what = f"image {index + 1}"
    return encode(_decode(data, info, what), what)


def prepare(images: Sequence[bytes]) -> list[bytes]:
    """A request's images checked, WebP and AVIF re-encoded; the rest unchanged.

    ``InvalidRequest`` names the image (by its place in ``images``) for anything
    ``images.info`` refuses, data that does not decode, and re-encoded images that
    together pass ``MAX_IMAGES_BYTES``."""
    infos = check_images(images, ACCEPTED)
    out = [
        transcode(data, info, i) if info.format in TRANSCODED else data
        for i, (data, info) in enumerate(zip(images, infos, strict=True))
    ]
    total = sum(len(b) for b in out)
    if total > config.MAX_IMAGES_BYTES:
        raise InvalidRequest(
            f"the request's images take {total} bytes once re-encoded "
            f"for the model; the limit is {config.MAX_IMAGES_BYTES} bytes "
            "together"
        )
    return out
