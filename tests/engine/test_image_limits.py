"""The runner's own image checks (issue 26), against the real stb_image in libmtmd.

The runner checks a request's images again before libmtmd decodes them (the daemon
did, but the runner must not trust it): a PNG inflate bomb, a JPEG scan storm and a
request over ``LOCALLLM_MAX_REQUEST_PIXELS`` fail that request with a 400, and the
engine goes on serving.  And the limits sit exactly where stb_image's own rules do:
a PNG stream one byte short of what IHDR implies is what stb refuses too (stb takes
any amount more, so the check allows ``PNG_SLACK`` more), and the encoder's JPEG
with ``MAX_JPEG_SCANS`` scans still decodes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.errors import InvalidRequest
from localllm.images.data import MAX_JPEG_SCANS, PNG_SLACK, png_data_size
from localllm.runner.messages import MEDIA_MARKER, CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run_one
from tests.support.images import PROGRESSIVE_JPEG, make_png, with_scans, zeros
from tests.support.visionmodel import RED, RED_GREEDY, make_projector, png


@pytest.fixture(scope="module")
def vengine(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> Iterator[Engine]:
    proj = make_projector(tmp_path_factory.mktemp("mmproj-limits"))
    with Engine([str(tiny)], opts(projector=str(proj))) as e:
        yield e


def complete(e: Engine, *images: bytes) -> str:
    """The request's greedy text, or its failure's message."""
    r = run_one(
        e,
        CompletionRequest(
            id="r",
            prompt=MEDIA_MARKER * len(images),
            images=list(images),
            sampling=SamplingParams(temperature=0.0),
            num_predict=4,
        ),
    )
    if r.failed is not None:
        assert r.failed.status == 400
        return r.failed.message
    return r.text


def test_bombs_fail_their_request_and_the_engine_keeps_serving(
    vengine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = png(32, 32, RED)
    cases = [
        ([make_png(1, 1, zeros(16 << 20))], "image 1: its PNG data inflates to more than"),
        ([ok, with_scans(MAX_JPEG_SCANS + 1)], "image 2: its JPEG has more than"),
    ]
    for images, words in cases:
        assert words in complete(vengine, *images)
        assert complete(vengine, ok) == RED_GREEDY[:4]
    monkeypatch.setenv("LOCALLLM_MAX_REQUEST_PIXELS", str(2 * 32 * 32))
    assert "LOCALLLM_MAX_REQUEST_PIXELS" in complete(vengine, ok, ok, ok)
    assert complete(vengine, ok, ok) != ""


def stb_decodes(e: Engine, data: bytes) -> bool:
    """Whether libmtmd's stb_image decodes ``data`` (tokenized without our checks)."""
    assert e.projector is not None
    try:
        e.projector.tokenize(e.projector.marker, [data], True, True)
    except InvalidRequest as exc:
        assert "could not be decoded" in str(exc)
        return False
    return True


@pytest.mark.parametrize(
    ("colour", "depth", "interlace"),
    [(2, 8, 0), (6, 16, 0), (0, 1, 0), (3, 4, 0), (0, 2, 1), (2, 8, 1), (4, 16, 1), (3, 1, 1)],
)
def test_the_png_size_rule_is_stbs(
    vengine: Engine, colour: int, depth: int, interlace: int
) -> None:
    for w, h in ((13, 7), (9, 17)):
        need = png_data_size(w, h, depth, colour, interlace)

        def made(n: int, w: int = w, h: int = h) -> bytes:
            return make_png(
                w, h, zlib.compress(bytes(n)), depth=depth, colour=colour, interlace=interlace
            )

        assert stb_decodes(vengine, made(need))
        assert not stb_decodes(vengine, made(need - 1))
        assert stb_decodes(vengine, made(need + PNG_SLACK))


def test_the_encoders_jpeg_decodes_up_to_the_scan_limit(vengine: Engine) -> None:
    assert stb_decodes(vengine, PROGRESSIVE_JPEG)
    assert complete(vengine, PROGRESSIVE_JPEG) != ""
    assert "its JPEG has more than" not in complete(vengine, with_scans(MAX_JPEG_SCANS))
