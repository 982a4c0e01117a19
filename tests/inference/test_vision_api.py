"""Images through the real daemon: /api/chat, /api/generate and the /v1 routes.

``tiny-vision`` is the tiny model with tests/support/visionmodel.py's projector and a
template that renders the last message's content, so a prompt that ends in an
image continues greedily with ``RED_GREEDY`` or ``GREEN_GREEDY``; ``tiny`` has
no projector.  One daemon serves the module (no test changes the store).
"""

from __future__ import annotations

import base64
import io
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.support.daemon import Daemon, own_daemon
from tests.support.images import header_only, make_png, with_scans, zeros
from tests.support.variants import GREEDY_OPTS, stock_vision
from tests.support.visionmodel import (
    GREEN,
    GREEN_GREEDY,
    N_IMAGE_TOKENS,
    RED,
    RED_GREEDY,
    png,
)

RED_PNG, GREEN_PNG = png(32, 32, RED), png(32, 32, GREEN)


def encoded(rgb: tuple[int, int, int], fmt: str, **kw: Any) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), rgb).save(out, fmt, **kw)
    return out.getvalue()


# What browsers and phones send: the daemon re-encodes them as PNG for libmtmd.
RED_WEBP = encoded(RED, "WEBP", quality=80)
GREEN_WEBP = encoded(GREEN, "WEBP", lossless=True)
GREEN_AVIF = encoded(GREEN, "AVIF", quality=80)
N = 6  # tokens to generate: enough to tell the colours apart


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + b64(data)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with own_daemon(
        tmp_path_factory,
        "vision-daemon",
        stock_vision,
        LOCALLLM_NUM_PARALLEL="2",
        LOCALLLM_CONTEXT_LENGTH="512",
    ) as d:
        yield d


def post(d: Daemon, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(d.url + path, json=body, timeout=120, headers=headers)


def chat(
    d: Daemon, content: str, *images: bytes, model: str = "tiny-vision", **kw: Any
) -> httpx.Response:
    message: dict[str, Any] = {"role": "user", "content": content}
    if images:
        message["images"] = [b64(i) for i in images]
    return post(
        d,
        "/api/chat",
        {
            "model": model,
            "messages": [message],
            "stream": False,
            "options": {**GREEDY_OPTS, "num_predict": N},
            **kw,
        },
    )


def test_show_says_vision(daemon: Daemon) -> None:
    shown = post(daemon, "/api/show", {"model": "tiny-vision"}).json()
    assert "vision" in shown["capabilities"]
    assert shown["projector_info"]["clip.projector_type"] == "mlp"
    assert "vision" not in post(daemon, "/api/show", {"model": "tiny"}).json()["capabilities"]


def test_api_chat_and_generate_see_the_image(daemon: Daemon) -> None:
    red = chat(daemon, "", RED_PNG)
    assert red.status_code == 200, red.text
    assert red.json()["message"]["content"] == RED_GREEDY[:N]
    text = chat(daemon, "x").json()
    with_image = chat(daemon, "x", GREEN_PNG).json()
    # BOS + the image's tokens + "x": the image adds exactly its tokens.
    assert with_image["prompt_eval_count"] - text["prompt_eval_count"] == N_IMAGE_TOKENS
    # ``[img]`` puts the image after the text, so the reply follows the image.
    green = chat(daemon, "x [img]", GREEN_PNG).json()
    assert green["message"]["content"] == GREEN_GREEDY[:N]
    gen = post(
        daemon,
        "/api/generate",
        {
            "model": "tiny-vision",
            "prompt": "",
            "images": [b64(GREEN_PNG)],
            "stream": False,
            "options": {**GREEDY_OPTS, "num_predict": N},
        },
    )
    assert gen.status_code == 200, gen.text
    assert gen.json()["response"] == GREEN_GREEDY[:N]


def test_v1_routes_take_their_image_parts(daemon: Daemon) -> None:
    oa = post(
        daemon,
        "/v1/chat/completions",
        {
            "model": "tiny-vision",
            "max_tokens": N,
            "temperature": 0,
            "seed": 1,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "x"},
                        {"type": "image_url", "image_url": {"url": data_url(RED_PNG)}},
                    ],
                }
            ],
        },
    )
    assert oa.status_code == 200, oa.text
    assert oa.json()["choices"][0]["message"]["content"] == RED_GREEDY[:N]
    assert oa.json()["usage"]["prompt_tokens"] == 2 + 1 + N_IMAGE_TOKENS  # BOS x \n image
    an = post(
        daemon,
        "/v1/messages",
        {
            "model": "tiny-vision",
            "max_tokens": N,
            "temperature": 0,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": b64(GREEN_PNG),
                            },
                        }
                    ],
                }
            ],
        },
    )
    assert an.status_code == 200, an.text
    assert an.json()["content"][0]["text"] == GREEN_GREEDY[:N]
    usage = an.json()["usage"]  # what the prompt cache held (BOS) is counted apart
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == 1 + N_IMAGE_TOKENS
    rs = post(
        daemon,
        "/v1/responses",
        {
            "model": "tiny-vision",
            "max_output_tokens": N,
            "temperature": 0,
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": data_url(RED_PNG)}],
                }
            ],
        },
    )
    assert rs.status_code == 200, rs.text
    message = [o for o in rs.json()["output"] if o["type"] == "message"][-1]
    assert message["content"][0]["text"] == RED_GREEDY[:N]


def huge_png() -> bytes:
    data = bytearray(RED_PNG)
    data[16:24] = struct.pack(">II", 20000, 20000)
    return bytes(data)


@pytest.mark.parametrize(
    "model,images,status,message",
    [
        ("tiny", [b64(RED_PNG)], 400, 'model "tiny" does not support images'),
        ("tiny-vision", ["%%%"], 400, "image 1 is not valid base64"),
        (
            "tiny-vision",
            [b64(RED_PNG), b64(huge_png())],
            400,
            "image 2 is 20000x20000 pixels; the limit is 50 megapixels",
        ),
        ("tiny-vision", [b64(RED_PNG[:20])], 400, "image 1: truncated or corrupt PNG"),
        # A sound header over cut-off pixels: the runner's decoder refuses it, nothing crashes.
        ("tiny-vision", [b64(RED_PNG[:40])], 400, "image 1 could not be decoded"),
        ("tiny-vision", [b64(b"GIF89a")], 400, "image 1: truncated GIF"),
        ("tiny-vision", [b64(RED_PNG)] * 100, 400, "100 images in one request; the limit is 16"),
        (
            "tiny-vision",
            ["https://example.com/cat.png"],
            400,
            "image 1 is an http(s) URL, which this server does not fetch",
        ),
    ],
)
def test_bad_images_are_refused(
    daemon: Daemon, model: str, images: list[str], status: int, message: str
) -> None:
    for path, body in (
        ("/api/chat", {"messages": [{"role": "user", "content": "x", "images": images}]}),
        ("/api/generate", {"prompt": "x", "images": images}),
    ):
        r = post(daemon, path, {"model": model, "stream": False, **body})
        assert r.status_code == status, (path, r.text)
        assert message in r.json()["error"], (path, r.text)


def test_v1_refusals_are_precise(daemon: Daemon) -> None:
    def oa(url: str, text: str = "x") -> httpx.Response:
        return post(
            daemon,
            "/v1/chat/completions",
            {
                "model": "tiny-vision",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": text},
                            {"type": "image_url", "image_url": {"url": url}},
                        ],
                    }
                ],
            },
        )

    r = oa("http://127.0.0.1:9/cat.png")
    assert r.status_code == 400
    assert "LOCALLLM_FETCH_IMAGE_URLS=1" in r.json()["error"]["message"]
    r = oa(data_url(huge_png()))
    assert r.status_code == 400 and "20000x20000" in r.json()["error"]["message"]
    r = oa(data_url(RED_PNG), text="<__media__>")
    assert r.status_code == 400 and "image marker" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "images,message",
    [
        (
            [make_png(1, 1, zeros(16 << 20))],
            "image 1: its PNG data inflates to more than the 4 bytes its 1x1 pixels need",
        ),
        ([RED_PNG, with_scans(5000)], "image 2: its JPEG has more than 100 scans"),
        (
            [header_only(8000, 5000)] * 3,
            "the request's images hold 120000000 pixels together (8000x5000, 8000x5000, "
            "8000x5000); the limit is 100000000 pixels a request (LOCALLLM_MAX_REQUEST_PIXELS)",
        ),
    ],
)
def test_images_that_decode_to_more_than_they_declare_are_refused(
    daemon: Daemon, images: list[bytes], message: str
) -> None:
    for path, body in (
        (
            "/api/chat",
            {"messages": [{"role": "user", "content": "x", "images": [b64(i) for i in images]}]},
        ),
        ("/api/generate", {"prompt": "x", "images": [b64(i) for i in images]}),
    ):
        r = post(daemon, path, {"model": "tiny-vision", "stream": False, **body})
        assert r.status_code == 400, (path, r.text)
        assert message in r.json()["error"], (path, r.text)
    # The daemon and the model go on serving.
    assert httpx.get(daemon.url + "/health", timeout=5).status_code == 200
    red = chat(daemon, "", RED_PNG)
    assert red.status_code == 200 and red.json()["message"]["content"] == RED_GREEDY[:N]


def test_webp_and_avif_are_seen_as_their_pixels(daemon: Daemon) -> None:
    """Each format through /api/chat, /api/generate and the /v1 routes' own image parts."""
    png_count = chat(daemon, "x [img]", GREEN_PNG).json()["prompt_eval_count"]
    for image, greedy in (
        (RED_WEBP, RED_GREEDY),
        (GREEN_WEBP, GREEN_GREEDY),
        (GREEN_AVIF, GREEN_GREEDY),
    ):
        r = chat(daemon, "x [img]", image)
        assert r.status_code == 200, r.text
        assert r.json()["message"]["content"] == greedy[:N]
        assert r.json()["prompt_eval_count"] == png_count  # the same image tokens
    gen = post(
        daemon,
        "/api/generate",
        {
            "model": "tiny-vision",
            "prompt": "",
            "images": [b64(GREEN_AVIF)],
            "stream": False,
            "options": {**GREEDY_OPTS, "num_predict": N},
        },
    )
    assert gen.status_code == 200 and gen.json()["response"] == GREEN_GREEDY[:N], gen.text
    oa = post(
        daemon,
        "/v1/chat/completions",
        {
            "model": "tiny-vision",
            "max_tokens": N,
            "temperature": 0,
            "seed": 1,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/webp;base64," + b64(RED_WEBP)},
                        }
                    ],
                }
            ],
        },
    )
    assert oa.status_code == 200, oa.text
    assert oa.json()["choices"][0]["message"]["content"] == RED_GREEDY[:N]
    an = post(
        daemon,
        "/v1/messages",
        {
            "model": "tiny-vision",
            "max_tokens": N,
            "temperature": 0,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/webp",
                                "data": b64(GREEN_WEBP),
                            },
                        }
                    ],
                }
            ],
        },
    )
    assert an.status_code == 200 and an.json()["content"][0]["text"] == GREEN_GREEDY[:N]
    rs = post(
        daemon,
        "/v1/responses",
        {
            "model": "tiny-vision",
            "max_output_tokens": N,
            "temperature": 0,
            "input": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_image",
                            "image_url": "data:image/avif;base64," + b64(GREEN_AVIF),
                        }
                    ],
                }
            ],
        },
    )
    assert rs.status_code == 200, rs.text
    assert [o for o in rs.json()["output"] if o["type"] == "message"][-1]["content"][0][
        "text"
    ] == GREEN_GREEDY[:N]


def webp_bomb() -> bytes:
    """34 bytes of lossless WebP that declare 16383x16383 pixels (1 GiB decoded)."""
    out = io.BytesIO()
    Image.new("RGB", (16383, 16383)).save(out, "WEBP", lossless=True, method=0)
    return out.getvalue()


def avif_lie() -> bytes:
    """An AVIF whose boxes say 64x48 over a 4000x4000 AV1 stream."""
    out = io.BytesIO()
    Image.new("RGB", (4000, 4000)).save(out, "AVIF", speed=10)
    data = bytearray(out.getvalue())
    at = data.find(b"ispe")
    data[at + 8 : at + 16] = struct.pack(">II", 64, 48)
    return bytes(data)


@pytest.mark.parametrize(
    "image,message",
    [
        (RED_WEBP[:-8], "image 2 could not be decoded (WebP: "),  # truncated
        (GREEN_WEBP[:30] + bytes(40), "image 2 could not be decoded (WebP: "),  # corrupt
        (webp_bomb(), "image 2 is 16383x16383 pixels; the limit is 50 megapixels"),
        (
            avif_lie(),
            "image 2: its AV1 data makes frames of up to 4000x4000 pixels; its header "
            "declares 64x48",
        ),
        (GREEN_AVIF.replace(b"avif", b"heic"), "image 2: HEIC images are not supported"),
    ],
)
def test_bad_webps_and_avifs_are_refused_and_the_daemon_serves_on(
    daemon: Daemon, image: bytes, message: str
) -> None:
    for path, body in (
        (
            "/api/chat",
            {"messages": [{"role": "user", "content": "x", "images": [b64(RED_PNG), b64(image)]}]},
        ),
        ("/api/generate", {"prompt": "x", "images": [b64(RED_PNG), b64(image)]}),
    ):
        r = post(daemon, path, {"model": "tiny-vision", "stream": False, **body})
        assert r.status_code == 400, (path, r.text)
        assert message in r.json()["error"], (path, r.text)
    r = post(
        daemon,
        "/v1/chat/completions",
        {
            "model": "tiny-vision",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url(RED_PNG)}},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/webp;base64," + b64(image)},
                        },
                    ],
                }
            ],
        },
    )
    assert r.status_code == 400 and message in r.json()["error"]["message"], r.text
    red = chat(daemon, "", RED_WEBP)
    assert red.status_code == 200 and red.json()["message"]["content"] == RED_GREEDY[:N]
