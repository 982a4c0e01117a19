"""Images in generate and chat requests: decode, check, place the media markers, fetch URLs.

The runner takes a text prompt holding one ``MEDIA_MARKER`` per image plus the
encoded image files in the same order (``CompletionRequest.images``); libmtmd
turns each marker into the model family's own image tokens (Gemma 3's
``<start_of_image>``, Qwen2-VL's ``<|vision_start|>``...), so templates only
ever see the marker as text.  That is what llama.cpp's server does for every
template, typed-content ones included, and it keeps Jinja and Go templates
alike.

Where an image goes, per message (as Ollama): each ``[img]`` in the message's
text takes the next image of that message; images left over go before the
text.  The ``/v1`` converters put ``[img]`` where an image part was, so part
order survives.  Literal marker text in a request with images is refused:
otherwise a user could shift every image by one.

Images are checked before the model loads (``localllm.images.info``: format,
declared pixel size, bytes, count, the request's pixels together, and what the
data inflates to), and WebP and AVIF are re-encoded as PNG then
(``localllm.images.convert``: libmtmd reads neither); both run where the plan is
built, in a worker thread.  Base64 is decoded exactly once per
request, so the same image sent again in a later turn gives the runner the
same bytes (the engine keys its prefix cache by the image's hash; re-encoding
is deterministic).  ``http(s)``
URLs are fetched only when ``LOCALLLM_FETCH_IMAGE_URLS`` allows it
(``image_fetch``), when the request runs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from localllm import config
from localllm.errors import InvalidRequest
from localllm.images.convert import prepare
from localllm.runner.messages import MEDIA_MARKER

PLACEHOLDER = "[img]"  # Ollama's in-text image position
Ref = bytes | str  # decoded bytes, or an http(s) URL still to fetch


def is_url(value: str) -> bool:
    # ':' is not a base64 character, so no base64 payload starts like this.
    return value[:8].lower().startswith(("http://", "https://"))


def decode(value: Any, index: int) -> Ref:
    """One ``images`` entry (base64, a base64 ``data:`` URL, or an http(s) URL) -> a ref."""
    what = f"image {index + 1}"
    if not isinstance(value, str):
        raise InvalidRequest(f"{what} must be a base64 string")
    text = value.strip()
    if is_url(text):
        return text
    if text[:5].lower() == "data:":
        head, _, text = text.partition(",")
        if not head.lower().endswith(";base64"):
            raise InvalidRequest(f"{what}: only base64 data: URLs are supported")
    try:
        # validate=True refuses stray characters instead of silently dropping them.
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{what} is not valid base64") from None


def _check_count(n: int) -> None:
    if n > config.MAX_IMAGES:
        raise InvalidRequest(f"{n} images in one request; the limit is {config.MAX_IMAGES}")


def _place(text: str, markers: int) -> str:
    """``text`` with ``markers`` media markers: at its ``[img]`` places, the rest before it."""
    if MEDIA_MARKER in text:
        raise InvalidRequest(
            f"message text must not contain {MEDIA_MARKER!r}, the image "
            "marker, when the request has images"
        )
    lead = 0
    for _ in range(markers):
        if PLACEHOLDER in text:
            text = text.replace(PLACEHOLDER, MEDIA_MARKER, 1)
        else:
            lead += 1
    return MEDIA_MARKER * lead + text


@dataclass
class Images:
    """A request's images in prompt order, refs until ``resolve`` has fetched the URLs."""

    refs: list[Ref] = field(default_factory=list)
    _resolved: list[bytes] | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __bool__(self) -> bool:
        return bool(self.refs)

    @property
    def ready(self) -> list[bytes] | None:
        """The image bytes when nothing is left to fetch."""
        if self._resolved is None and all(isinstance(r, bytes) for r in self.refs):
            self._resolved = [r for r in self.refs if isinstance(r, bytes)]
        return self._resolved

    def check(self) -> None:
        """Count and every decoded image checked, WebP and AVIF re-encoded, before the
        model loads (CPU work: the plan's build step runs in a worker thread)."""
        _check_count(len(self.refs))
        for i, ref in enumerate(self.refs):
            if isinstance(ref, str):
                from localllm.inference.image_fetch import check_allowed

                check_allowed(i)
        present = [(i, r) for i, r in enumerate(self.refs) if isinstance(r, bytes)]
        try:
            ready = prepare([r for _, r in present])
        except InvalidRequest as exc:
            raise InvalidRequest(_renumber(str(exc), [i for i, _ in present])) from None
        for (i, _), data in zip(present, ready, strict=True):
            self.refs[i] = data

    async def resolve(self) -> list[bytes]:
        """Every image's bytes, URLs fetched once (``n`` choices share them) and checked.

        The fetches share the request's ``MAX_IMAGES_BYTES`` (what the inline images
        leave), refused as soon as the bytes that arrive pass it; the checks inflate
        PNG data and re-encode WebP and AVIF, so they run in a worker thread, off the
        event loop."""
        async with self._lock:
            if self.ready is None:
                from localllm.inference.image_fetch import Budget, fetch_image

                budget = Budget(
                    config.MAX_IMAGES_BYTES - sum(len(r) for r in self.refs if isinstance(r, bytes))
                )
                out = [
                    r if isinstance(r, bytes) else await fetch_image(r, i, budget=budget)
                    for i, r in enumerate(self.refs)
                ]
                self._resolved = await asyncio.to_thread(prepare, out)
        assert self._resolved is not None
        return self._resolved


def _renumber(message: str, indices: Sequence[int]) -> str:
    """images.info names images by position in the list it saw; name them as the request did."""
    for seen, real in sorted(enumerate(indices), reverse=True):
        message = message.replace(f"image {seen + 1}", f"image {real + 1}", 1)
    return message


def chat_images(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Images]:
    """Messages with their ``images`` turned into markers in the text, and the images."""
    total = sum(len(m.get("images") or ()) for m in messages)
    _check_count(total)  # before decoding 100 images just to refuse them
    images = Images()
    out: list[dict[str, Any]] = []
    for msg in messages:
        found = msg.get("images") or []
        msg = {k: v for k, v in msg.items() if k != "images"}
        if total and isinstance(msg.get("content"), str):
            msg["content"] = _place(msg["content"], len(found))
        elif found:
            msg["content"] = MEDIA_MARKER * len(found)
        images.refs += [decode(v, len(images.refs)) for v in found]
        out.append(msg)
    images.check()
    return out, images


def prompt_images(prompt: str, values: list[str] | None) -> tuple[str, Images]:
    """A generate prompt (templated or raw) with its ``images`` as markers."""
    values = values or []
    _check_count(len(values))
    images = Images([decode(v, i) for i, v in enumerate(values)])
    images.check()
    return (_place(prompt, len(values)) if values else prompt), images


def require_vision(has_projector: bool, model: str) -> None:
    """Images for a model without a projector: Ollama's 400, before any image is decoded."""
    if not has_projector:
        raise InvalidRequest(
            f'model "{model}" does not support images (it has no vision projector)'
        )


def check_rendered(prompt: str, images: Images) -> None:
    """The template kept every image exactly once (one marker each, in order)."""
    count = prompt.count(MEDIA_MARKER)
    if count != len(images.refs):
        raise InvalidRequest(
            f"the model's template rendered {count} image markers for {len(images.refs)} images"
        )
