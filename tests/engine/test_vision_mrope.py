"""Images on an M-RoPE model (Qwen2-VL style) through the real libllama + libmtmd.

The models are tests/support/qwenvlmodel.py's (Qwen2-VL's text architecture, and Qwen3-VL's
with interleaved sections for the position checks): a red image steers the greedy text to
``RED_GREEDY``, a green one to ``GREEN_GREEDY``, and the ``attention=True`` text model
makes every logprob depend on every position, so comparing the engine's logprobs
with libmtmd's own evaluation (``mtmd_helper_eval_chunks`` through the shim) checks
the positions of text before, inside and after an image.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.engine.positions import Positions
from localllm.runner.messages import MEDIA_MARKER, CompletionRequest, SamplingParams
from tests.support.engine_steps import collect, opts, run, run_one
from tests.support.qwenvlmodel import (
    GREEN_GREEDY,
    RED_GREEDY,
    make_qwen_model,
    make_qwen_projector,
    noise_png,
    tokens_for,
)
from tests.support.tinymodel import expected_greedy
from tests.support.visionmodel import GREEN, RED, png

GREEDY = SamplingParams(temperature=0.0)
VISION_START = len("<|vision_start|>")  # libmtmd's Qwen wrapper, one token per character
VISION_END = len("<|vision_end|>")


@pytest.fixture(scope="session")
def qwen_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("qwen2vl")
    return (
        make_qwen_model(d),
        make_qwen_model(d, attention=True, name="attn.gguf"),
        make_qwen_projector(d),
    )


@pytest.fixture(scope="session")
def qwen3_attn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-VL's text architecture: interleaved M-RoPE sections (IMROPE)."""
    return make_qwen_model(tmp_path_factory.mktemp("qwen3vl"), attention=True, arch="qwen3vl")


def engine_for(
    files: tuple[Path, Path, Path],
    *,
    attention: bool = False,
    model: Path | None = None,
    **kw: object,
) -> Engine:
    plain, attn, proj = files
    base: dict[str, object] = {"n_parallel": 2, "projector": str(proj)}
    base.update(kw)
    return Engine([str(model or (attn if attention else plain))], opts(**base))


@pytest.fixture
def qengine(qwen_files: tuple[Path, Path, Path]) -> Iterator[Engine]:
    with engine_for(qwen_files) as e:
        yield e


def req(id: str, prompt: str, *images: bytes, **kw: object) -> CompletionRequest:
    return CompletionRequest(id=id, prompt=prompt, images=list(images), sampling=GREEDY, **kw)  # type: ignore[arg-type]


def image_prompt(before: str, n_image: int, after: str) -> int:
    """Prompt tokens of BOS + before + [image] + after, with the Qwen wrapper."""
    return 1 + len(before) + VISION_START + n_image + VISION_END + len(after)


def reference(ref: Engine, prompt: str, *images: bytes) -> list[tuple[str, float]]:
    """libmtmd's own evaluation of the prompt in a fresh sequence: the 5 best next tokens."""
    proj = ref.projector
    assert proj is not None
    ref.ctx.seq_rm(0, -1, -1)
    _, media = proj.tokenize(prompt.replace(MEDIA_MARKER, proj.marker), list(images), True, True)
    n_past = proj.ffi.new("int32_t *", 0)
    rc = proj.lib.ll_mtmd_eval_chunks(
        proj.handle, ref.ctx.handle, media.chunks.handle, 0, 64, n_past
    )
    assert rc == 0
    _, top = ref.ctx.top_logprobs(-1, -1, 5)
    return [(ref.model.token_text(t), lp) for t, lp in top]


def assert_close(got: list[tuple[str, float]] | None, want: list[tuple[str, float]]) -> None:
    assert got is not None
    assert [t for t, _ in got] == [t for t, _ in want]
    assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(got, want, strict=True)), (got, want)


def first_pieces(e: Engine, id: str, prompt: str, *images: bytes, n: int = 1) -> list:
    r = run_one(e, req(id, prompt, *images, num_predict=n, logprobs=5))
    assert r.failed is None and r.done is not None
    return r.pieces


def test_an_image_request_completes_and_counts_its_tokens(qengine: Engine) -> None:
    assert qengine.projector is not None and qengine.projector.mrope
    assert qengine.projector.n_pos_per_embd == 4
    r = run_one(qengine, req("a", MEDIA_MARKER, png(32, 32, RED)))
    assert r.failed is None and r.done is not None
    assert r.text == RED_GREEDY
    assert r.done.prompt_tokens == image_prompt("", tokens_for(32, 32)[0], "")


def test_different_colours_give_different_greedy_text(qengine: Engine) -> None:
    red = run_one(qengine, req("r", MEDIA_MARKER, png(32, 32, RED)))
    green = run_one(qengine, req("g", MEDIA_MARKER, png(48, 32, GREEN)))
    assert (red.text, green.text) == (RED_GREEDY, GREEN_GREEDY)
    after = run_one(qengine, req("x", f"ab{MEDIA_MARKER}x", png(32, 32, RED)))
    assert after.text == expected_greedy("x")


def test_positions_advance_by_the_images_n_pos_not_its_tokens(qengine: Engine) -> None:
    n_img, n_pos = tokens_for(48, 32)  # 6x4 tokens on 6 positions
    assert (n_img, n_pos) == (24, 6)
    r = run_one(qengine, req("p", f"ab{MEDIA_MARKER}cd", png(48, 32, GREEN), num_predict=3))
    assert r.done is not None and r.done.eval_count == 3
    s = qengine.slots[0]
    cells = image_prompt("ab", n_img, "cd") + 2  # the last sampled token is not decoded
    assert len(s.cache) == s.pos.cells == cells
    assert s.pos.next == cells - n_img + n_pos
    # What llama.cpp's memory holds agrees: the last cell sits just before the next position.
    assert qengine.model.lib.ll_mem_seq_pos_max(qengine.ctx.handle, s.seq) == s.pos.next - 1


@pytest.mark.parametrize("arch", ["qwen2vl", "qwen3vl"])
def test_text_and_image_positions_match_libmtmds_own_evaluation(
    qwen_files: tuple[Path, Path, Path], qwen3_attn: Path, arch: str
) -> None:
    img = noise_png(48, 32)  # tokens that differ: their grid positions matter
    prompt = f"ab{MEDIA_MARKER}cd"
    model = qwen3_attn if arch == "qwen3vl" else qwen_files[1]
    with engine_for(qwen_files, model=model, n_parallel=1) as ref:
        assert ref.model.lib.ll_model_n_pos_per_embd(ref.model.handle) == 4
        want = reference(ref, prompt, img)
        want_next = reference(ref, prompt + "e", img)  # greedy continues "e" after "d"
        want_text = reference(ref, "hello")
    # n_batch 8 < 24 image tokens: the image goes in 3 parts, each with its grid positions.
    for n_batch in (64, 8):
        with engine_for(qwen_files, model=model, n_batch=n_batch, n_ubatch=n_batch) as e:
            pieces = first_pieces(e, "a", prompt, img, n=2)
            assert pieces[0].text == "e"
            assert_close(pieces[0].top_logprobs, want)
            assert_close(pieces[1].top_logprobs, want_next)  # a decoded token's position
            assert_close(first_pieces(e, "t", "hello")[0].top_logprobs, want_text)


def test_turn_two_reuses_the_image_and_keeps_positions(qwen_files: tuple[Path, Path, Path]) -> None:
    img = png(32, 32, RED)
    n_img = tokens_for(32, 32)[0]
    with engine_for(qwen_files, attention=True, n_parallel=1) as ref:
        want2 = reference(ref, f"ab{MEDIA_MARKER}cdXY", img)
        want3 = reference(ref, f"ab{MEDIA_MARKER}cdef", png(32, 32, GREEN))
    with engine_for(qwen_files, attention=True) as e:
        assert e.projector is not None
        first = run_one(e, req("1", f"ab{MEDIA_MARKER}cd", img, num_predict=1))
        assert first.done is not None and first.done.cached_tokens == 0
        calls: list[object] = []
        encode = e.projector.encode
        e.projector.encode = lambda *a: calls.append(a) or encode(*a)  # type: ignore[method-assign]
        second = run_one(e, req("2", f"ab{MEDIA_MARKER}cdXY", img, num_predict=1, logprobs=5))
        assert second.done is not None
        assert second.done.prompt_tokens == image_prompt("ab", n_img, "cdXY")
        assert second.done.cached_tokens == image_prompt("ab", n_img, "cd")
        assert calls == []
        assert_close(second.pieces[0].top_logprobs, want2)
        # Another image at the same place: cut back to its start, encoded, same positions.
        third = run_one(
            e, req("3", f"ab{MEDIA_MARKER}cdef", png(32, 32, GREEN), num_predict=1, logprobs=5)
        )
        assert third.done is not None and third.done.cached_tokens == 1 + 2 + VISION_START
        assert len(calls) == 1
        assert_close(third.pieces[0].top_logprobs, want3)


def test_slots_with_images_and_text_share_batches(qwen_files: tuple[Path, Path, Path]) -> None:
    with engine_for(qwen_files, n_parallel=3, n_batch=16, n_ubatch=16) as e:
        out = run(
            e,
            req("r", MEDIA_MARKER, png(32, 32, RED)),
            req("t", "hello"),
            req("g", f"x{MEDIA_MARKER}", png(48, 32, GREEN)),
        )
        assert (out["r"].text, out["g"].text) == (RED_GREEDY, GREEN_GREEDY)
        assert out["t"].text == expected_greedy("hello")


def test_a_request_cancelled_inside_an_image_leaves_a_reusable_slot(
    qwen_files: tuple[Path, Path, Path],
) -> None:
    img = png(48, 32, GREEN)  # 24 tokens: three steps of 8
    with engine_for(qwen_files, n_parallel=1, n_batch=8, n_ubatch=8) as e:
        e.submit(req("c", MEDIA_MARKER, img))
        out: dict = {}
        s = e.slots[0]
        while (
            s.active is None
            or s.active.media.span_at(s.active.n_past) is None
            or s.active.n_past == s.active.media.spans[0].start
        ):
            collect(e.step(), out)  # until part of the image is in the cache
        e.cancel("c")
        while e.has_work():
            collect(e.step(), out)
        assert out["c"].done is not None and out["c"].done.reason == "cancel"
        again = run_one(e, req("a", MEDIA_MARKER, img))
        assert again.text == GREEN_GREEDY
        assert again.done is not None and again.done.cached_tokens == 1 + VISION_START
        assert e.model.lib.ll_mem_seq_pos_max(e.ctx.handle, s.seq) == s.pos.next - 1


def test_text_only_requests_on_the_mrope_model(qengine: Engine) -> None:
    for prompt in ("hello", "0", "x"):
        r = run_one(qengine, req(prompt, prompt))
        assert r.text == expected_greedy(prompt)
    s = qengine.slots[0]
    assert s.pos.next == s.pos.cells  # text alone: one position per cell


def test_a_cut_inside_an_image_moves_back_to_its_start() -> None:
    p = Positions()
    p.add_text(3)
    assert p.add_image(10, 4, True) == 3
    p.add_image(6, 4, False)  # the rest of the same image
    p.add_text(2)
    assert (p.cells, p.next) == (21, 9)
    assert p.truncate(20) == (20, 8)  # inside the text after the image
    assert p.truncate(10) == (3, 3)  # inside the image: all of it goes
    assert (p.cells, p.next) == (3, 3)
    assert p.truncate(5) == (3, None)  # nothing beyond the end to drop


def test_the_projector_follows_the_text_models_positions(
    tiny: Path, qwen_files: tuple[Path, Path, Path]
) -> None:
    # libmtmd takes M-RoPE from the text model, so the Qwen projector on a plain llama
    # model places images one position per token, and the engine decodes them so.
    with Engine([str(tiny)], opts(projector=str(qwen_files[2]))) as e:
        assert e.projector is not None
        assert (e.projector.mrope, e.projector.n_pos_per_embd) == (False, 1)
        r = run_one(e, req("x", MEDIA_MARKER, png(32, 32)))
        assert r.failed is None and r.done is not None
        s = e.slots[0]
        assert s.pos.next == s.pos.cells == len(s.cache)
