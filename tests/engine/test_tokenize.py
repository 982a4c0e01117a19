"""Long texts tokenized in chunks: the same tokens as one call, linear time, bounded work."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine import tokenize as chunked
from localllm.engine.model import Model
from localllm.engine.slots import fit_prompt


@pytest.fixture(scope="module")
def model(tiny: Path) -> Iterator[Model]:
    m = Model([str(tiny)])
    yield m
    m.close()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunked, "LONG", 64)
    monkeypatch.setattr(chunked, "CHUNK", 40)
    monkeypatch.setattr(chunked, "SEARCH", 16)
    monkeypatch.setattr(chunked, "WINDOW", 12)


def _texts(seed: int) -> Iterator[str]:
    # In the tiny vocabulary: a-z, A-Z, digits, some punctuation and the space; out of
    # it (byte tokens): quotes, backslashes, newlines, é, 中, emoji; and the special <s>.
    pieces = ["a", "Z", "7", " ", ".", "\n", '"', "\\", "é", "中", "😀", "<s>", "</s>", "ab c"]
    rng = random.Random(seed)
    for _ in range(20):
        yield "".join(rng.choice(pieces) for _ in range(rng.randint(50, 600)))


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("seed", range(5))
def test_chunks_give_the_tokens_of_one_call(model: Model, seed: int) -> None:
    for text in _texts(seed):
        for add_special in (True, False):
            for parse_special in (True, False):
                whole = model.tokenize_bytes(text.encode(), add_special, parse_special)
                assert model.tokenize(text, add_special, parse_special) == whole, text


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("seed", range(3))
def test_a_slot_gets_what_fit_prompt_keeps(model: Model, seed: int) -> None:
    for text in _texts(seed):
        whole = model.tokenize_bytes(text.encode(), True, True)
        for n_ctx in (16, 64, 4096):
            for keep in (0, 4, 40):
                tokens, fits = chunked.slot_tokens(
                    model.tokenize_bytes, text, True, True, n_ctx, keep
                )
                assert fits == (len(whole) < n_ctx)
                assert fit_prompt(tokens, n_ctx, keep) == fit_prompt(whole, n_ctx, keep)
            tokens, fits = chunked.slot_tokens(model.tokenize_bytes, text, True, True, n_ctx, None)
            assert tokens == whole if fits else tokens == whole[: len(tokens)]


def test_a_text_far_over_the_context_is_read_only_as_far_as_needed(model: Model) -> None:
    text = "abc " * 500_000  # 2 MB
    seen = [0]

    def counting(raw: bytes, add_special: bool, parse_special: bool) -> list[int]:
        seen[0] += len(raw)
        return model.tokenize_bytes(raw, add_special, parse_special)

    tokens, fits = chunked.slot_tokens(counting, text, True, True, 512, None)
    assert not fits and len(tokens) >= 512
    assert seen[0] < 64 << 10
    seen[0] = 0
    tokens, fits = chunked.slot_tokens(counting, text, True, True, 512, 10)
    assert not fits and len(tokens) == 10 + (512 - 10) // 2
    assert tokens[:10] == model.tokenize_bytes(text[:40].encode(), True, True)[:10]
    assert seen[0] < 64 << 10


def test_characters_outside_the_vocabulary_tokenize_in_linear_time(model: Model) -> None:
    # One libllama call copies its whole output once per such character: 480 KB of these
    # took 24 s through the daemon, and 1 MB would take minutes.
    text = '"\\\n' * 350_000
    start = time.process_time()
    assert len(model.tokenize(text, False, True)) == len(text)
    assert time.process_time() - start < 10.0
