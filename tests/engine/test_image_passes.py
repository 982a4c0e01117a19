"""The shim decodes a request's images one at a time (issue 26): same chunks, one bitmap held.

``ll_mtmd_tokenize`` tokenizes the prompt image by image, each pass with one decoded
image and placeholders (sizes, no pixels) for the images before it;
``ll_mtmd_tokenize_at_once`` is libmtmd's own single tokenization with every image
decoded first, the reference.  On the tiny LLaVA-style projector and the Qwen2-VL one
(M-RoPE grid positions), for prompts with several images (adjacent, repeated, of
different sizes, first and last), both must give the same chunks: kinds, tokens, ids,
positions and encoded embeddings, and the engine's logprobs must match libmtmd's own
evaluation of the reference chunks.  And the runner's peak memory for eight large flat
PNGs is about one decoded image, not eight.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localllm.engine.engine import Engine
from localllm.engine.vision import Projector
from localllm.runner.messages import MEDIA_MARKER as M, CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run_one
from tests.support.qwenvlmodel import make_qwen_model, make_qwen_projector, noise_png
from tests.support.visionmodel import GREEN, RED, make_projector, png

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> Iterator[Engine]:
    proj = make_projector(tmp_path_factory.mktemp("mmproj-passes"))
    with Engine([str(tiny)], opts(projector=str(proj))) as e:
        yield e


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    d = tmp_path_factory.mktemp("qwen-passes")
    model, proj = make_qwen_model(d, attention=True), make_qwen_projector(d)
    with Engine([str(model)], opts(n_parallel=1, projector=str(proj))) as e:
        yield e


def chunks(p: Projector, prompt: str, images: list[bytes], at_once: bool) -> list[Any]:
    """Everything the engine reads of each chunk: kind, tokens, id, positions, embeddings."""
    keys, media = p.tokenize(prompt.replace(M, p.marker), images, True, True, at_once=at_once)
    ffi, lib, h = p.ffi, p.lib, media.chunks.handle
    kind, n, n_pos = ffi.new("int *"), ffi.new("int *"), ffi.new("int *")
    idb = ffi.new("char[]", 128)
    out: list[Any] = [keys, [(s.start, s.n, s.n_pos) for s in media.spans]]
    for i in range(lib.ll_chunks_count(h)):
        assert lib.ll_chunk_info(h, i, kind, n, n_pos, idb, len(idb)) == 0
        row: list[Any] = [kind[0], n[0], n_pos[0], ffi.string(idb)]
        if kind[0] == 0:
            toks = ffi.new("int32_t[]", max(n[0], 1))
            row.append(ffi.unpack(toks, lib.ll_chunk_text_tokens(h, i, toks, n[0])))
        else:
            pos = ffi.new("int32_t[]", 4 * n[0])
            got = lib.ll_chunk_image_pos(h, i, 7, pos, 4 * n[0])
            row.append(ffi.unpack(pos, 4 * got) if got > 0 else got)
            embd = ffi.new("float[]", n[0] * p.n_embd)
            assert lib.ll_mtmd_encode(p.handle, h, i, embd, n[0] * p.n_embd) == 0
            row.append(bytes(ffi.buffer(embd)))
        out.append(row)
    return out


CASES = [
    (f"{M}{M}", lambda: [png(32, 32, RED), png(48, 32, GREEN)]),  # adjacent
    (f"ab{M}cd{M}ef{M}", lambda: [noise_png(48, 32), png(32, 32, GREEN), noise_png(32, 48, 1)]),
    (f"{M}x{M}", lambda: [png(32, 32, RED)] * 2),  # the same image twice
    (f"lead {M}", lambda: [noise_png(64, 32, 2)]),
    ("no image", lambda: []),
]


@pytest.mark.parametrize(("prompt", "images"), CASES)
@pytest.mark.parametrize("model", ["llava", "qwen"])
def test_image_by_image_gives_libmtmds_own_chunks(
    request: pytest.FixtureRequest, model: str, prompt: str, images: Any
) -> None:
    e: Engine = request.getfixturevalue(model)
    assert e.projector is not None
    imgs = images()
    want = chunks(e.projector, prompt, imgs, at_once=True)
    assert chunks(e.projector, prompt, imgs, at_once=False) == want
    assert len(want) - 2 >= len(imgs)  # one row per chunk, after keys and spans


def test_engine_matches_libmtmds_evaluation_of_the_reference_chunks(qwen: Engine) -> None:
    p = qwen.projector
    assert p is not None
    prompt = f"ab{M}{M}x{M}cd"  # greedy goes on with "e"
    imgs = [noise_png(48, 32), noise_png(32, 32, 3), noise_png(32, 48)]
    qwen.ctx.seq_rm(0, -1, -1)
    _, media = p.tokenize(prompt.replace(M, p.marker), imgs, True, True, at_once=True)
    n_past = p.ffi.new("int32_t *", 0)
    assert (
        p.lib.ll_mtmd_eval_chunks(p.handle, qwen.ctx.handle, media.chunks.handle, 0, 64, n_past)
        == 0
    )
    want = qwen.ctx.top_logprobs(-1, -1, 5)[1]
    qwen.ctx.seq_rm(0, -1, -1)
    r = run_one(
        qwen,
        CompletionRequest(
            id="m", prompt=prompt, images=imgs, sampling=GREEDY, num_predict=1, logprobs=5
        ),
    )
    assert r.failed is None and r.pieces[0].top_logprobs is not None
    got = [(qwen.model.token_text(t), lp) for t, lp in want]
    assert [t for t, _ in r.pieces[0].top_logprobs] == [t for t, _ in got]
    assert all(
        abs(a - b) < 1e-4 for (_, a), (_, b) in zip(r.pieces[0].top_logprobs, got, strict=True)
    )


def flat_png(side: int, rgb: tuple[int, int, int]) -> bytes:
    """A side x side PNG of one colour: a few KB that decode to 3 * side² bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    z = zlib.compressobj(9)
    row = b"\x00" + bytes(rgb) * side
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


def _status(key: str) -> int:
    """A /proc/self/status figure in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


def test_eight_large_images_peak_at_about_one_decoded_bitmap(llava: Engine) -> None:
    # 3400 x 3400: 35 MB decoded, over glibc's largest mmap threshold (32 MiB), so each
    # bitmap is its own mapping and RSS follows what is held.  All eight at once held
    # 8 x 35 MB plus libmtmd's copy (~310 MB); one at a time holds one bitmap and its
    # copies while it decodes (~105 MB).
    side = 3400
    bitmap = 3 * side * side
    imgs = [flat_png(side, (255, 30 * k, 0)) for k in range(8)]
    assert sum(map(len, imgs)) < 8 * 64 * 1024
    p = llava.projector
    assert p is not None
    Path("/proc/self/clear_refs").write_text("5")  # restart VmHWM from the current RSS
    base = _status("VmRSS")
    _, media = p.tokenize(p.marker * 8, imgs, True, True)
    peak = _status("VmHWM") - base
    assert len(media.spans) == 8
    assert peak < 4 * bitmap, f"peak {peak >> 20} MiB for 8 images of {bitmap >> 20} MiB"
