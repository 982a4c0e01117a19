"""Copies kept during prefill on a sliding-window model (engine/checkpoints.py): a new
conversation with the same head, after a restart, takes the head's cells back bit for bit.

The model is the tiny one built as Gemma 3 (``sliding_window=32``: its KV cache keeps
only the last 32 positions' cells), so a copy of a whole conversation serves no prompt
that leaves it before its end: only a copy that ends where the new prompt branches does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.engine.binding import native
from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest
from tests.support.engine_steps import SYSTEM, Result, opts, req, run, same
from tests.support.tinymodel import make_tiny_model

HEAD = SYSTEM * 2  # 496 tokens (one per character): past MIN_TOKENS and the window


@pytest.fixture(scope="module")
def swa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("swa"), attention=True, sliding_window=32)


def engine(model: Path, folder: Path, **kw: object) -> Engine:
    return Engine(
        [str(model)],
        opts(
            n_ctx=1024,
            n_parallel=2,
            n_batch=64,
            n_ubatch=64,
            prompt_cache_disk=1 << 30,
            prompt_cache_dir=str(folder),
            prompt_cache_key=str(folder.with_name(folder.name + ".key")),
            **kw,
        ),
    )


def alone(model: Path, r: CompletionRequest) -> Result:
    with Engine([str(model)], opts(n_ctx=1024, n_batch=64, n_ubatch=64, prompt_cache=0)) as e:
        return run(e, r)[r.id]


def cached(r: Result) -> int:
    assert r.done is not None
    return r.done.cached_tokens


def stored(model: Path, folder: Path) -> list[int]:
    """The token counts of the copies on disk, as a new engine finds them."""
    with engine(model, folder) as e:
        assert e.parked is not None and e.parked.disk is not None
        return sorted(len(x.tokens) for x in e.parked.disk.entries)


def cells(data: object, size: int) -> bytes:
    ffi, _ = native()
    return bytes(ffi.buffer(data, size))


def test_a_new_conversation_after_a_restart_reuses_the_head_bit_for_bit(
    swa: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "prompts"
    first = req("a", HEAD + "first", cache_head=len(HEAD))
    with engine(swa, folder) as e:
        assert e.model.n_swa == 32
        head = len(e.tokenize(HEAD))
        run(e, first)
    # The head, the whole prompt (before the reply) and the conversation with its reply.
    assert stored(swa, folder)[:2] == [head, head + len("first")]
    later = req("b", HEAD + "second", cache_head=len(HEAD))
    with engine(swa, folder) as e:
        assert e.parked is not None and e.parked.disk is not None
        (entry,) = [x for x in e.parked.disk.entries if len(x.tokens) == head]
        loaded = e.parked.disk.load(entry)
        assert loaded is not None
        kept = cells(loaded.data, loaded.size)
        got = run(e, later)["b"]
    assert cached(got) == head
    same(got, alone(swa, later))
    # The cells on disk are the ones a lone evaluation of the head leaves, byte for byte.
    with Engine([str(swa)], opts(n_ctx=1024, n_batch=64, n_ubatch=64, prompt_cache=0)) as e:
        run(e, req("h", HEAD, num_predict=0))
        saved = e.ctx.seq_save(e.slots[0].seq)
        assert saved is not None and len(e.slots[0].cache) == head
        assert cells(*saved) == kept


def test_without_a_hint_the_point_where_prompts_part_is_kept(swa: Path, tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    with engine(swa, folder) as e:
        head = len(e.tokenize(HEAD))
        run(e, req("a", HEAD + "one"))
        run(e, req("b", HEAD + "two"))  # parts from "a" after the head
    assert head in stored(swa, folder)
    third = req("c", HEAD + "three")
    with engine(swa, folder) as e:
        got = run(e, third)["c"]
    assert cached(got) == head
    same(got, alone(swa, third))


def test_the_same_prompt_again_takes_the_copy_made_before_its_reply(
    swa: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "prompts"
    prompt = req("a", HEAD + "again")
    with engine(swa, folder) as e:
        n = len(e.tokenize(prompt.prompt))  # type: ignore[arg-type]
        run(e, prompt)
    with engine(swa, folder) as e:
        got = run(e, req("b", HEAD + "again"))["b"]
    assert cached(got) == n - 1  # the last token is evaluated again for its logits
    same(got, alone(swa, req("b", HEAD + "again")))


def test_a_model_without_a_window_keeps_no_checkpoints(tiny_attn: Path, tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    with engine(tiny_attn, folder) as e:
        e.submit(req("a", HEAD + "x", cache_head=len(HEAD)))
        e.step()
        a = next(s.active for s in e.slots if s.active is not None)
        assert a.marks == []  # its conversation copy serves any prefix already
        while e.has_work():
            e.step()
    # One copy: the conversation (BOS, the prompt, its reply "yz").
    assert stored(tiny_attn, folder) == [1 + len(HEAD) + 1 + 2]
