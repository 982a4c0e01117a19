"""Image files on the user's disk, as the CLI and the TUI attach them to a chat message.

Owns what both front ends share (so neither imports the other): the file
extensions taken for images, reading one image file with its checks, and
turning text a terminal pasted (a path, a quoted path, ``file://`` URLs) into
paths.  The daemon checks images again; checking here lets a front end refuse
a bad file when it is attached rather than when the message is sent.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import unquote, urlparse

from localllm import config
from localllm.errors import InvalidRequest
from localllm.format import format_file_size
from localllm.images.info import ACCEPTED, ImageInfo, check_image

EXTENSIONS = ("png", "jpg", "jpeg", "webp", "avif", "gif", "bmp")


def has_image_extension(path: Path) -> bool:
    return path.suffix.lower().lstrip(".") in EXTENSIONS


def to_path(text: str, cwd: Path | None = None) -> Path:
    """One path as typed or pasted: quotes and ``file://`` taken off, ``~`` expanded,
    relative to ``cwd`` (the current directory by default)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if text.startswith("file://"):
        text = unquote(urlparse(text).path)
    path = Path(text).expanduser()
    return path if path.is_absolute() else (cwd or Path.cwd()) / path


def pasted_images(text: str, cwd: Path | None = None) -> list[Path]:
    """The image files a paste names, or ``[]`` when it is ordinary text.

    Terminals paste a dropped file as its path, quoted or with ``\\ `` before
    spaces, or as a ``file://`` URL; several files come space- or
    newline-separated.  Every word must be an existing file with an image
    extension, so pasting a sentence that mentions ``cat.png`` stays text.
    """
    text = text.strip()
    if not text or len(text) > 16_384:
        return []
    whole = to_path(text, cwd)
    if "\n" not in text and has_image_extension(whole) and whole.is_file():
        return [whole]  # one path with bare spaces in it
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: not a list of paths
        return []
    paths = [to_path(w, cwd) for w in words]
    if paths and all(has_image_extension(p) and p.is_file() for p in paths):
        return paths
    return []


def read_image(path: Path, index: int = 0) -> tuple[bytes, ImageInfo]:
    """The bytes of image file ``path`` and its header, or ``InvalidRequest`` naming it.

    The size is checked before reading, so a huge file is never loaded;
    ``check_image`` then refuses what the daemon would (format, pixel size); a WebP's
    or AVIF's pixels are decoded by the daemon, which refuses one that does not decode.
    """
    if not path.exists():
        raise InvalidRequest(f"{path}: no such file")
    if not path.is_file():
        raise InvalidRequest(f"{path}: not a file")
    size = path.stat().st_size
    if size > config.MAX_IMAGE_BYTES:
        raise InvalidRequest(
            f"{path.name} is {format_file_size(size)}; the limit is "
            f"{format_file_size(config.MAX_IMAGE_BYTES)}"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"{path}: {exc.strerror or exc}") from None
    try:
        info = check_image(data, index, ACCEPTED)
    except InvalidRequest as exc:
        # check_image names the image by its number in the request; the file's
        # name is what the user knows.
        raise InvalidRequest(str(exc).replace(f"image {index + 1}", path.name, 1)) from None
    return data, info
