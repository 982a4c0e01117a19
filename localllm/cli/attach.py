"""Image files named in a ``run`` prompt (one-shot or REPL) become the message's images.

As Ollama's CLI: a word of the prompt that is the path of an existing file
ending in .png, .jpg, .jpeg, .webp, .gif or .bmp (``./cat.png``, ``~/Pictures/a.jpg``,
``cat.png``; quoted or with ``\\ `` for spaces) is attached and taken out of the
text, and the CLI says which files it attached.  A word that names no existing
file stays in the text: "what is a .png file" is just a question.  The
daemon checks the images (format, pixel size) and the model's vision support;
only the file size is checked here, so a huge file is not read and sent.
"""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from localllm import config
from localllm.errors import InvalidRequest
from localllm.format import format_file_size as _human
from localllm.images.files import EXTENSIONS

if TYPE_CHECKING:
    from localllm.api.bodies import ChatMessage

_EXT = "|".join(EXTENSIONS)
_PATH_RE = re.compile(
    rf"""'([^']+\.(?:{_EXT}))'|"([^"]+\.(?:{_EXT}))"|((?:\\ |[^\s'"])+\.(?:{_EXT}))"""
    r"""(?=$|[\s,;:!?)])""",
    re.IGNORECASE,
)


def find_images(text: str) -> tuple[str, list[Path]]:
    """``text`` without the image paths it names, and those paths (existing files only)."""
    found: list[Path] = []
    kept: list[str] = []
    last = 0
    for m in _PATH_RE.finditer(text):
        raw = next(g for g in m.groups() if g is not None).replace("\\ ", " ")
        path = Path(raw).expanduser()
        if not path.is_file():
            continue
        kept.append(text[last : m.start()])
        last = m.end()
        found.append(path)
    kept.append(text[last:])
    cleaned = re.sub(r"[ \t]{2,}", " ", "".join(kept)).strip()
    return (cleaned if found else text), found


def attach(text: str, *, quiet: bool = False) -> ChatMessage:
    """The user message for ``text``: its image files read, base64-encoded, reported."""
    content, paths = find_images(text)
    message: ChatMessage = {"role": "user", "content": content}
    if not paths:
        return message
    images = []
    for path in paths:
        size = path.stat().st_size
        if size > config.MAX_IMAGE_BYTES:
            raise InvalidRequest(
                f"image {path} is {_human(size)}; the limit is {_human(config.MAX_IMAGE_BYTES)}"
            )
        images.append(base64.b64encode(path.read_bytes()).decode("ascii"))
        if not quiet:
            print(f"Added image '{path}' ({_human(size)})", file=sys.stderr)
    message["images"] = images
    return message
