"""Image bytes built by hand for the image checks: PNGs chunk by chunk, progressive JPEGs
with a chosen number of scans, headers with nothing after."""

from __future__ import annotations

import base64
import re
import struct
import zlib

from tests.support.visionmodel import png

# libjpeg-turbo 2.1's cjpeg -progressive -restart 1 -quality 80, from a 64x48
# gradient: its standard script's 10 scans, with RST markers inside the scans.
PROGRESSIVE_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODwwQFxQYGBcUFhYaHSUfGhsjHBYW"
    "ICwgIyYnKSopGR8tMC0oMCUoKSj/2wBDAQcHBwoIChMKChMoGhYaKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgo"
    "KCgoKCgoKCgoKCgoKCgoKCgoKCj/wgARCAAwAEADASIAAhEBAxEB/8QAFwABAQEBAAAAAAAAAAAAAAAABAMGB//EABkB"
    "AQEAAwEAAAAAAAAAAAAAAAUDAQIEBv/dAAQABP/aAAwDAQACEAMQAAAB5ohTbaBQ6nSgWyrySJdlZpf/0Mw2ibDFuq2E"
    "ioRaKRrptBL/0ZXQjn8ma6baomsm3Oma6qyS/8QAGxAAAwADAQEAAAAAAAAAAAAAAAECAxESISL/3QAEAAj/2gAIAQEA"
    "AQUCUCgWMWIWIWORRIsaP//QmCINaFLYsaQpOWKT/9HHBrSjGJChIUsmBSf/0sUHO6595FGhQcik/9PFPkTpTOlM6FBM"
    "ikmT/9SJ+OBT7MigUigUn//EABkRAQEBAAMAAAAAAAAAAAAAAAMAAgERIf/dAAQABP/aAAgBAwEBPwHD9RPzE0TX/9DC"
    "+xLEsS3/0TWJYliW/8QAJREAAQIFAwQDAAAAAAAAAAAAAQACAxIhofARMUEEE2GxInHh/9oACAECAQE/Aenhd1OhQGGX"
    "c+E4MFC0C/pOkBqBl1//0IEUsgfHc0ReGCVtAL+Ai+Wm2X+kYkuZdf/RZF0Y3Tge6Ivl24y/CMTTM/UYmmZm5X//xAAg"
    "EAACAQMEAwAAAAAAAAAAAAAAASEQEWEgQVGRMXHR/90ABAAI/9oACAEBAAY/Atfhn//Q0SQjZG5//9GsU4RCPh//0qWL"
    "IyTLJ6p//9MvTJZEdnCOD//UEj0ZZamaf//EACMQAAICAQMEAwEAAAAAAAAAAAABESExQVFhEHGBoZHR4fD/2gAIAQEA"
    "AT8h6XxnGJWYQhqjZN+D8of/0OkxrEs4rsbIFfaJUSHM/Y//0QrRl9NrcVW5UxL2IUsEfcckj//SBTeKLw4WRQ3dWVUl"
    "IgfwBfkIKxwsn//ThlsY0YfLwQ0krEW7qyGoJCNV3CFYh7P/1IWFTzFtvAalIRUxqzC2q0Qz+YNf3qz/3QAEAAT/2gAM"
    "AwEAAgADAAAAENGrlP/QL0MP/9HYl7f/xAAaEQADAAMBAAAAAAAAAAAAAAAAAREhQVFh/9oACAEDAQE/EOwczYPexnT/"
    "0L5FcsrsrD//0bsqep6n/8QAIhEBAAEDBAMAAwAAAAAAAAAAAREAIVExQWGRcYGhscHw/9oACAECAQE/ELKplHfNnl0/"
    "LxTcmwyuoPdWEXEB0K/Hyv/QLOvA4y9fUpQ+gU1X8T+gupTYagwHCl1w6GikFg9HiBDsvG1f/9Fn6pTyofSaFA4LBwFl"
    "OVb0xVptFraBuDjLqrFM8R6jO9otIJyNq//EACUQAAICAQQCAgIDAAAAAAAAAAERACExQVFhcZHRsfCBocHh8f/dAAQA"
    "CP/aAAgBAQABPxB2kfpHqHQCBU3NQgASdB/ECSZ2w8wz1Pc//9ByqNVQFjpxp3C+SG1IrcEdMmGZTWaX1BBGHgZ8wbBD"
    "vIL4n//RYqhNaMQrHMAmQABkmKzo0s+oXbghDGBxe8uVg07hUNQJsWhx+Z//0mKpjxVFbf24SF0zUzGtgNOBzAq+wcCC"
    "oGnp6hEBY9PmHAEuL8v8n//TAQxQMqN7CBXcXkBip+5hmGKwN5iWwGnHcDgiiX8QdGxVs9RMmMUy9fbn/9QxIGi81HAA"
    "WW3+5gDgNe/y4wRdVNRKkCGL4giCAHvJ3gxtHLgZoCQ8kPB98T//2Q=="
)


def make_png(
    width: int,
    height: int,
    idat: bytes | list[bytes],
    *,
    depth: int = 8,
    colour: int = 2,
    interlace: int = 0,
    extra: bytes = b"",
) -> bytes:
    """A PNG around the given compressed image data (one IDAT, or one per piece)."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    pieces = [idat] if isinstance(idat, bytes) else idat
    plte = chunk(b"PLTE", bytes(3 * (1 << depth))) if colour == 3 else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + plte
        + extra
        + b"".join(chunk(b"IDAT", p) for p in pieces)
        + chunk(b"IEND", b"")
    )


def zeros(n: int) -> bytes:
    """n zero bytes, deflated (1032:1): a bomb's payload without holding n bytes."""
    z = zlib.compressobj(9)
    block = bytes(1 << 20)
    out = [z.compress(block) for _ in range(n >> 20)]
    return b"".join(out) + z.compress(bytes(n & ((1 << 20) - 1))) + z.flush()


def with_scans(total: int) -> bytes:
    """The encoder's JPEG with its last scan repeated up to ``total`` scans."""
    last = scans(PROGRESSIVE_JPEG)[-1]
    body, tail = PROGRESSIVE_JPEG[:-2], PROGRESSIVE_JPEG[last:-2]
    return body + tail * (total - len(scans(PROGRESSIVE_JPEG))) + b"\xff\xd9"


def header_only(width: int, height: int) -> bytes:
    """A PNG header declaring width x height, with data that could never be inflated."""
    return png(1, 1)[:16] + struct.pack(">II", width, height) + png(1, 1)[24:]


def chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def scans(data: bytes) -> list[int]:
    return [m.start() for m in re.finditer(rb"\xff\xda", data)]
