"""Loading (good, truncated, garbage GGUFs), memory report, tokenizer, embeddings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from localllm.engine import binding
from localllm.engine.engine import Engine
from localllm.errors import InvalidModelFile, InvalidRequest
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run_one
from tests.support.tinymodel import BOS, GREEDY, make_tiny_model, split_paths


def test_tokenize_detokenize_round_trip(engine: Engine) -> None:
    text = "hello World. é€!"
    toks = engine.tokenize(text)
    assert toks[0] == BOS
    assert engine.tokenize(text, add_special=False) == toks[1:]
    assert engine.detokenize(toks[1:]) == text
    assert engine.tokenize("<s>x", add_special=False) == [BOS, *engine.tokenize("x", False)]
    assert BOS not in engine.tokenize("<s>x", add_special=False, parse_special=False)


def test_memory_report_has_model_kv_and_compute(engine: Engine) -> None:
    rep = engine.memory_report()
    assert set(rep) == {"CPU"}
    cpu = rep["CPU"]
    assert cpu["model"] > 3_000_000  # the f32 weights are about 3.5 MiB
    assert cpu["kv"] > 0 and cpu["compute"] > 0


@pytest.mark.parametrize("keep", [0.5, 0.02])
def test_truncated_gguf_is_refused_without_a_crash(tmp_path: Path, keep: float) -> None:
    good = make_tiny_model(tmp_path)
    data = good.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(InvalidModelFile) as err:
        Engine([str(bad)], opts())
    assert "bad.gguf" in err.value.message


def test_not_a_gguf_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"this is not a model\n" * 100)
    with pytest.raises(InvalidModelFile):
        Engine([str(junk)], opts())
    with pytest.raises(InvalidModelFile):
        Engine([str(tmp_path / "missing.gguf")], opts())


def test_quantize_writes_a_loadable_model(tmp_path: Path) -> None:
    src = make_tiny_model(tmp_path)
    out = tmp_path / "q8.gguf"
    binding.quantize(src, out, "q8_0", threads=1)
    assert 0 < out.stat().st_size < src.stat().st_size
    with Engine([str(out)], opts()) as e:
        assert e.info()["n_vocab"] == 330
    with pytest.raises(InvalidRequest):
        binding.quantize(src, out, "Q9_Z")


@pytest.fixture
def embedder(tmp_path: Path) -> Engine:
    return Engine(
        [str(make_tiny_model(tmp_path, pooling="mean"))], opts(n_parallel=2, embedding=True)
    )


def test_embeddings_are_normalised_and_exact(embedder: Engine) -> None:
    with embedder:
        vecs, n = embedder.embed(["ab", "cd", "ab", "abcd"])
        assert n == 3 + 3 + 3 + 5
        for v in vecs:
            assert math.sqrt(sum(x * x for x in v)) == pytest.approx(1.0, abs=1e-5)

        def cos(a: list[float], b: list[float]) -> float:
            return sum(x * y for x, y in zip(a, b, strict=True))

        assert cos(vecs[0], vecs[2]) == pytest.approx(1.0, abs=1e-5)
        assert cos(vecs[0], vecs[1]) == pytest.approx(1 / 3, abs=1e-4)  # only BOS shared
        assert cos(vecs[0], vecs[3]) == pytest.approx(3 / math.sqrt(15), abs=1e-4)


def test_embedding_overflow(embedder: Engine) -> None:
    with embedder:
        limit = min(embedder.info()["n_ctx"], embedder.info()["n_batch"])
        long = "a" * (limit + 10)
        _, n = embedder.embed([long])
        assert n == limit
        with pytest.raises(InvalidRequest, match="exceeds the context length"):
            embedder.embed([long], truncate=False)


def test_generative_load_refuses_embed(engine: Engine) -> None:
    with pytest.raises(InvalidRequest):
        engine.embed(["x"])


def test_split_gguf_loads_from_all_parts(tmp_path: Path) -> None:
    parts = split_paths(make_tiny_model(tmp_path, splits=3))
    assert len(parts) == 3 and all(p.exists() for p in parts)
    with Engine([str(p) for p in parts], opts()) as e:
        r = run_one(e, CompletionRequest("r", "hello", sampling=SamplingParams(temperature=0)))
        assert r.text == GREEDY["hello"]


def test_close_is_idempotent(tiny: Path) -> None:
    e = Engine([str(tiny)], opts())
    e.close()
    e.close()


def test_embedding_load_still_generates(embedder: Engine) -> None:
    with embedder:
        embedder.embed(["ab"])
        r = run_one(embedder, CompletionRequest("r", "x", sampling=SamplingParams(temperature=0)))
        assert r.text == "yz"
        assert embedder.embed(["ab"])[1] == 3
