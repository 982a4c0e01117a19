"""Images in requests, without a daemon: decoding, marker placement, limits, converters."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

import pytest

from localllm import config
from localllm.compat.openai.messages import messages_to_native
from localllm.errors import InvalidRequest
from localllm.inference.images import (
    Images,
    chat_images,
    check_rendered,
    decode,
    prompt_images,
    require_vision,
)
from localllm.runner.messages import MEDIA_MARKER as M
from tests.support.visionmodel import GREEN, RED, png

RED_PNG = png(32, 32, RED)
GREEN_PNG = png(32, 32, GREEN)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def huge_png(width: int, height: int) -> bytes:
    """A PNG header declaring ``width`` x ``height`` pixels (nothing to decode behind it)."""
    return RED_PNG[:16] + struct.pack(">II", width, height) + RED_PNG[24:]


def test_decode_base64_data_urls_and_urls() -> None:
    assert decode(b64(RED_PNG), 0) == RED_PNG
    assert decode("data:image/png;base64," + b64(RED_PNG), 0) == RED_PNG
    # Line-wrapped base64 (as `base64` writes it) is fine.
    wrapped = "\n".join(b64(RED_PNG)[i : i + 76] for i in range(0, len(b64(RED_PNG)), 76))
    assert decode(wrapped, 0) == RED_PNG
    assert decode("https://example.com/cat.png", 0) == "https://example.com/cat.png"
    with pytest.raises(InvalidRequest, match="image 3 is not valid base64"):
        decode("not base64!", 2)
    with pytest.raises(InvalidRequest, match="only base64 data: URLs"):
        decode("data:image/png,rawbytes", 0)
    with pytest.raises(InvalidRequest, match="image 1 must be a base64 string"):
        decode(12, 0)


def test_markers_go_where_the_images_are() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is this?", "images": [b64(RED_PNG)]},
        {"role": "assistant", "content": "red"},
        {
            "role": "user",
            "content": "compare [img] with [img]",
            "images": [b64(GREEN_PNG), b64(RED_PNG), b64(GREEN_PNG)],
        },
    ]
    out, images = chat_images(messages)
    assert [m["content"] for m in out] == [
        "be brief",
        M + "what is this?",
        "red",
        M + f"compare {M} with {M}",
    ]
    assert all("images" not in m for m in out)
    # Order: the whole request's images, message by message, each message's in order.
    assert images.ready == [RED_PNG, GREEN_PNG, RED_PNG, GREEN_PNG]
    # The same image in a later turn is the same bytes (the engine's cache key).
    assert images.ready[0] == images.ready[2]


def test_generate_prompt_and_rendered_check() -> None:
    text, images = prompt_images("describe", [b64(RED_PNG)])
    assert text == M + "describe" and images.ready == [RED_PNG]
    assert prompt_images("describe", None)[0] == "describe"
    check_rendered(f"<s>user: {M}describe", images)
    with pytest.raises(InvalidRequest, match="rendered 0 image markers for 1 images"):
        check_rendered("<s>user: describe", images)
    with pytest.raises(InvalidRequest, match="must not contain '<__media__>'"):
        prompt_images(f"sneaky {M}", [b64(RED_PNG)])


def test_limits_and_bad_images_name_the_image() -> None:
    with pytest.raises(
        InvalidRequest, match=f"100 images in one request; the limit is {config.MAX_IMAGES}"
    ):
        chat_images([{"role": "user", "content": "x", "images": ["?"] * 100}])
    with pytest.raises(InvalidRequest, match=r"image 2 is 20000x20000 pixels"):
        prompt_images("x", [b64(RED_PNG), b64(huge_png(20000, 20000))])
    with pytest.raises(InvalidRequest, match=r"image 1: truncated or corrupt PNG"):
        prompt_images("x", [b64(RED_PNG[:20])])
    with pytest.raises(InvalidRequest, match=r"image 1: not a PNG, JPEG, GIF, BMP, WebP or AVIF"):
        prompt_images("x", [b64(b"hello world, no image here")])
    with pytest.raises(InvalidRequest, match='model "tiny" does not support images'):
        require_vision(False, "tiny")


def test_urls_are_refused_unless_fetching_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALLLM_FETCH_IMAGE_URLS", raising=False)
    msgs = [{"role": "user", "content": "x", "images": [b64(RED_PNG), "http://10.0.0.1/a.png"]}]
    with pytest.raises(
        InvalidRequest,
        match=r"image 2 is an http.s. URL, which this server "
        r"does not fetch.*LOCALLLM_FETCH_IMAGE_URLS=1",
    ):
        chat_images(msgs)
    monkeypatch.setenv("LOCALLLM_FETCH_IMAGE_URLS", "1")
    _, images = chat_images(msgs)
    assert images.ready is None  # fetched when the request runs
    # In mode 1 a private address is refused at fetch time.
    with pytest.raises(InvalidRequest, match=r"10\.0\.0\.1, a private, loopback or reserved"):
        asyncio.run(images.resolve())


def test_openai_image_parts_become_native_images() -> None:
    url = "data:image/png;base64," + b64(RED_PNG)
    native = messages_to_native(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "left"},
                    {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                    {"type": "text", "text": "right"},
                    {"type": "image_url", "image_url": url},
                ],
            }
        ]
    )
    assert native == [
        {"role": "user", "content": "left\n[img]\nright\n[img]", "images": [url, url]}
    ]
    out, images = chat_images(native)
    assert out[0]["content"] == f"left\n{M}\nright\n{M}"
    assert images.ready == [RED_PNG, RED_PNG]
    with pytest.raises(InvalidRequest, match=r"image_url\.url must be a string"):
        messages_to_native([{"role": "user", "content": [{"type": "image_url"}]}])


def test_images_empty_is_falsy() -> None:
    assert not Images() and Images().ready == []
