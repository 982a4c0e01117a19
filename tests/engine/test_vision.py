"""Images through the real libllama + libmtmd: the tiny model and tests/support/visionmodel.py.

The projector writes a red image's patches onto token ``a``'s one-hot dimension and
a green one's onto ``n``'s, so a prompt ending in an image continues greedily with
``RED_GREEDY`` or ``GREEN_GREEDY``: different images give different greedy text.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm import config
from localllm.engine.engine import Engine
from localllm.images.info import check_image, probe
from localllm.runner.messages import MEDIA_MARKER, CompletionRequest, SamplingParams
from tests.support.engine_steps import collect, opts, run, run_one
from tests.support.tinymodel import expected_greedy
from tests.support.visionmodel import (
    GREEN,
    GREEN_GREEDY,
    N_IMAGE_TOKENS,
    RED,
    RED_GREEDY,
    make_projector,
    png,
)

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="session")
def projector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_projector(tmp_path_factory.mktemp("mmproj"))


@pytest.fixture
def vengine(tiny: Path, projector: Path) -> Iterator[Engine]:
    with Engine([str(tiny)], opts(n_parallel=2, projector=str(projector))) as e:
        yield e


def huge_header() -> bytes:
    """A 1x1 PNG whose header claims 20000x20000 (never decoded: refused first)."""
    data = bytearray(png(1, 1))
    data[16:24] = struct.pack(">II", 20000, 20000)
    return bytes(data)


def req(id: str, prompt: str, *images: bytes, **kw: object) -> CompletionRequest:
    return CompletionRequest(id=id, prompt=prompt, images=list(images), sampling=GREEDY, **kw)  # type: ignore[arg-type]


def test_the_projector_loads_in_milliseconds_and_is_reported(tiny: Path, projector: Path) -> None:
    t0 = time.perf_counter()
    with Engine([str(tiny)], opts(projector=str(projector))) as e:
        assert time.perf_counter() - t0 < 5  # model + context + projector together
        assert e.info()["vision"] is True
        assert e.projector is not None and e.projector.n_embd == 384
        assert e.memory_report()["CPU"]["model"] > 0


def test_an_image_request_completes_and_its_tokens_count(vengine: Engine) -> None:
    r = run_one(vengine, req("a", MEDIA_MARKER, png(32, 32, RED)))
    assert r.failed is None and r.done is not None
    assert r.text == RED_GREEDY
    assert r.done.prompt_tokens == 1 + N_IMAGE_TOKENS  # BOS + the image
    text_only = run_one(vengine, req("t", "x"))
    assert text_only.done is not None and text_only.done.prompt_tokens == 2
    # The returned context holds only real tokens (an image cannot be sent back as ids).
    assert all(t >= 0 for t in r.done.context)


def test_different_images_give_different_greedy_text(vengine: Engine) -> None:
    red = run_one(vengine, req("r", MEDIA_MARKER, png(32, 32, RED)))
    green = run_one(vengine, req("g", MEDIA_MARKER, png(48, 48, GREEN)))
    assert (red.text, green.text) == (RED_GREEDY, GREEN_GREEDY)
    # Text after the image decides as usual (the tiny model reads the last token).
    after = run_one(vengine, req("x", f"{MEDIA_MARKER}x", png(32, 32, RED)))
    assert after.text == expected_greedy("x")


def test_turn_two_about_the_same_image_reuses_it_without_encoding(vengine: Engine) -> None:
    img = png(32, 32, RED)
    first = run_one(vengine, req("1", f"ab{MEDIA_MARKER}cd", img))
    assert first.done is not None and first.done.cached_tokens == 0
    assert vengine.projector is not None
    calls = []
    encode = vengine.projector.encode
    vengine.projector.encode = lambda *a: calls.append(a) or encode(*a)  # type: ignore[method-assign]
    second = run_one(vengine, req("2", f"ab{MEDIA_MARKER}cdXY", img))
    assert second.done is not None
    assert second.done.prompt_tokens == 1 + 2 + N_IMAGE_TOKENS + 4
    assert second.done.cached_tokens == 1 + 2 + N_IMAGE_TOKENS + 2  # BOS ab [image] cd
    assert calls == []
    # A different image at the same place diverges there: encoded, nothing after it reused.
    third = run_one(vengine, req("3", f"ab{MEDIA_MARKER}cdef", png(32, 32, GREEN)))
    assert third.done is not None and third.done.cached_tokens == 3
    assert len(calls) == 1


def test_a_prompt_ending_inside_a_cached_image_reevaluates_the_whole_image(vengine: Engine) -> None:
    img = png(32, 32, GREEN)
    run_one(vengine, req("1", MEDIA_MARKER, img))
    again = run_one(vengine, req("2", MEDIA_MARKER, img))
    assert again.text == GREEN_GREEDY
    assert again.done is not None and again.done.cached_tokens == 1  # BOS only


def test_two_slots_with_images_decode_alongside_text(vengine: Engine) -> None:
    out = run(
        vengine,
        req("r", MEDIA_MARKER, png(32, 32, RED)),
        req("t", "hello"),
        req("g", MEDIA_MARKER, png(32, 32, GREEN)),
    )
    assert out["r"].text == RED_GREEDY and out["g"].text == GREEN_GREEDY
    assert out["t"].text == expected_greedy("hello")


def test_an_image_chunk_never_holds_other_slots_more_than_one_step(
    tiny: Path, projector: Path
) -> None:
    # n_batch 2 < 4 image tokens: the image goes in two steps, and the text slot
    # decodes a token in each of them.
    with Engine(
        [str(tiny)], opts(n_parallel=2, n_batch=2, n_ubatch=2, projector=str(projector))
    ) as e:
        e.submit(req("t", "a", num_predict=30))
        out: dict = {}
        collect(e.step(), out)  # "t" prefilled and sampled its first token
        e.submit(req("r", MEDIA_MARKER, png(32, 32, RED)))
        before = len(out["t"].text)
        for _ in range(3):
            collect(e.step(), out)
        assert len(out["t"].text) == before + 3
        while e.has_work():
            collect(e.step(), out)
        assert out["r"].text == RED_GREEDY


@pytest.mark.parametrize(
    ("image", "words"),
    [
        (b"not an image at all", "not a PNG, JPEG, GIF or BMP"),
        (png(32, 32)[:40], "could not be decoded"),  # truncated after the header
        (png(32, 32)[:30] + b"\x00" * 200, "could not be decoded"),  # corrupt body
        (huge_header(), "20000x20000 pixels"),  # refused from the header alone
        (b"RIFF\x00\x00\x00\x00WEBPVP8X" + b"\x00" * 14, "WEBP images are not supported"),
    ],
)
def test_bad_images_fail_alone_and_the_engine_keeps_serving(
    vengine: Engine, image: bytes, words: str
) -> None:
    r = run_one(vengine, req("bad", MEDIA_MARKER, image))
    assert r.failed is not None and r.failed.status == 400
    assert words in r.failed.message
    assert run_one(vengine, req("ok", MEDIA_MARKER, png(32, 32))).text == RED_GREEDY


def test_too_many_images_and_mismatched_markers_are_refused(vengine: Engine) -> None:
    img = png(32, 32)
    many = run_one(vengine, req("m", MEDIA_MARKER * 100, *[img] * 100))
    assert many.failed is not None and many.failed.status == 400
    assert f"the limit is {config.MAX_IMAGES}" in many.failed.message
    odd = run_one(vengine, req("o", "no marker", img))
    assert odd.failed is not None and "0 image markers for 1 images" in odd.failed.message


def test_an_image_for_a_model_without_projector_is_refused(engine: Engine) -> None:
    r = run_one(engine, req("x", MEDIA_MARKER, png(32, 32)))
    assert r.failed is not None and r.failed.status == 400
    assert r.failed.message == "this model does not support images"


def test_an_image_prompt_over_the_context_is_refused(tiny: Path, projector: Path) -> None:
    with Engine([str(tiny)], opts(n_ctx=8, projector=str(projector))) as e:
        r = run_one(e, req("x", "abcd" + MEDIA_MARKER, png(32, 32)))
        assert r.failed is not None and "exceeds the context length" in r.failed.message


def test_headers_give_format_and_size() -> None:
    assert probe(png(7, 9)) == probe(png(7, 9))
    info = check_image(png(7, 9))
    assert (info.format, info.width, info.height) == ("png", 7, 9)
    jpeg = (
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
        b"\xff\xc0\x00\x11\x08\x00\x30\x00\x40\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    )
    assert (probe(jpeg).width, probe(jpeg).height) == (64, 48)
    gif = b"GIF89a\x05\x00\x06\x00" + b"\x00" * 4
    assert (probe(gif).width, probe(gif).height) == (5, 6)
    bmp = (
        b"BM"
        + b"\x00" * 12
        + (40).to_bytes(4, "little")
        + (3).to_bytes(4, "little")
        + (-4).to_bytes(4, "little", signed=True)
        + b"\x00" * 8
    )
    assert (probe(bmp).width, probe(bmp).height) == (3, 4)
