"""Images across the runner protocol: base64 frames, limits, a real runner with a projector."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from localllm import config
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.runner import protocol as P
from localllm.runner.messages import MEDIA_MARKER, LoadOptions
from localllm.runner.process import RunnerProcess
from tests.support import tinymodel as tm
from tests.support.runners import arun, collect, greedy, running
from tests.support.visionmodel import (
    GREEN,
    GREEN_GREEDY,
    N_IMAGE_TOKENS,
    RED,
    RED_GREEDY,
    make_projector,
    png,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("vision")
    return str(tm.make_tiny_model(d)), str(make_projector(d))


def test_images_travel_as_attachments_and_come_back_as_bytes() -> None:
    req = dataclasses.replace(greedy("i", MEDIA_MARKER * 2), images=[b"\x89PNG...", b"\xff\xd8"])
    frame = P.encode(P.complete_msg(req))
    # Raw after the JSON, not base64 inside it.
    assert frame.endswith(b"\x89PNG...\xff\xd8") and b"iVBOR" not in frame
    msg = P.read_frame(io.BytesIO(frame))
    assert msg is not None and P.parse_request(msg).images == req.images
    assert P.parse_request(P.complete_msg(greedy("t", "x"))).images == []


def test_bad_image_fields_are_refused_without_breaking_the_stream() -> None:
    msg = P.complete_msg(greedy("i", "x"))
    msg["request"]["images"] = [b"x"] * (config.MAX_IMAGES + 1)
    with pytest.raises(InvalidRequest, match="too many images"):
        P.parse_request(msg)
    msg["request"]["images"] = [bytes(config.MAX_IMAGES_BYTES + 1)]
    with pytest.raises(InvalidRequest, match="too many images or image bytes"):
        P.parse_request(msg)
    for bad in ("AAAA", ["AAAA"]):
        msg["request"]["images"] = bad
        with pytest.raises(P.ProtocolError):
            P.parse_request(msg)


def test_the_runner_serves_images_and_survives_bad_ones(files: tuple[str, str]) -> None:
    text_model, projector = files
    opts = LoadOptions(
        n_ctx=256, n_parallel=2, n_batch=64, n_ubatch=64, n_threads=1, projector=projector
    )

    async def go() -> None:
        async with running(RunnerProcess.start([text_model], opts, load_timeout=60)) as r:
            assert r.info["vision"] is True
            red = dataclasses.replace(greedy("r", MEDIA_MARKER), images=[png(32, 32, RED)])
            text, done = await collect(r, red)
            assert text == RED_GREEDY and done.prompt_tokens == 1 + N_IMAGE_TOKENS
            bad = dataclasses.replace(greedy("b", MEDIA_MARKER), images=[png(32, 32)[:40]])
            with pytest.raises(InvalidRequest, match="could not be decoded"):
                await collect(r, bad)
            many = dataclasses.replace(greedy("m", MEDIA_MARKER * 100), images=[png(8, 8)] * 100)
            with pytest.raises(LocalLLMError, match="too many images"):
                await collect(r, many)
            green = dataclasses.replace(greedy("g", MEDIA_MARKER), images=[png(32, 32, GREEN)])
            assert (await collect(r, green))[0] == GREEN_GREEDY
            assert r.alive

    arun(go())


def test_a_runner_without_projector_refuses_images(files: tuple[str, str]) -> None:
    text_model, _ = files

    async def go() -> None:
        opts = LoadOptions(n_ctx=128, n_threads=1)
        async with running(RunnerProcess.start([text_model], opts, load_timeout=60)) as r:
            assert r.info["vision"] is False
            req = dataclasses.replace(greedy("x", MEDIA_MARKER), images=[png(8, 8)])
            with pytest.raises(InvalidRequest, match="does not support images"):
                await collect(r, req)

    arun(go())


def test_a_projector_that_does_not_load_fails_the_load(
    files: tuple[str, str], tmp_path: Path
) -> None:
    text_model, _ = files
    broken = tmp_path / "mmproj.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)

    async def go() -> None:
        opts = LoadOptions(n_ctx=128, n_threads=1, projector=str(broken))
        with pytest.raises(LocalLLMError, match="projector"):
            await RunnerProcess.start([text_model], opts, load_timeout=60)

    arun(go())
