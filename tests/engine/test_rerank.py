"""Rank pooling in the engine: pair layouts, batching over slots, truncation, refusals.

The tiny reranker (tests/support/rerankmodel.py) scores a pair from its own tokens only,
so ``expected_score`` of the exact token list checks the layout and the head,
and a batch of many pairs checks that no sequence saw another's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine.embed import fill, pair_tokens
from localllm.engine.engine import Engine
from localllm.errors import InvalidRequest
from localllm.runner.messages import PairFormat
from tests.support.engine_steps import opts
from tests.support.rerankmodel import (
    TEMPLATE,
    bert_pair_ids,
    expected_bert_logit,
    expected_score,
    make_bert_reranker,
    make_rerank_model,
    pair_ids,
)
from tests.support.tinymodel import BOS, EOS, make_tiny_model, token_id, tokenize


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path = make_rerank_model(tmp_path_factory.mktemp("rerank"))
    # Three slots, a 64-token batch: pairs share decodes and spread over many of them.
    with Engine([str(path)], opts(n_parallel=3, embedding=True, rerank=True)) as e:
        yield e


def test_scores_are_the_heads_for_each_pair_alone(reranker: Engine) -> None:
    docs = [("xyz" * (i % 4)) + "abc"[: i % 3] + "q" * (i % 5) for i in range(40)]
    scores, n = reranker.rerank("find x", docs, PairFormat(template=TEMPLATE))
    want = [expected_score(pair_ids("find x", d)) for d in docs]
    assert scores == pytest.approx(want, abs=1e-3)
    assert n == sum(len(pair_ids("find x", d)) for d in docs)
    # One at a time gives the same scores: batching changes nothing.
    for doc, batched in zip(docs[:5], scores, strict=False):
        alone, _ = reranker.rerank("find x", [doc], PairFormat(template=TEMPLATE))
        assert alone[0] == pytest.approx(batched, abs=1e-4)


def test_the_template_is_read_with_its_control_tokens(reranker: Engine) -> None:
    model = reranker.model
    toks = pair_tokens(model, "q", "<s>d", PairFormat(template=TEMPLATE), 256, True)
    # The template's "<s>" is BOS; the document's "<s>" is just text: the template is
    # rendered whole (as llama-server), so it becomes BOS too.
    assert toks == [BOS, *tokenize("q:q;d:", bos=False), BOS, token_id("d"), token_id(".")]


def test_llama_servers_layout_with_eos_and_separator(reranker: Engine) -> None:
    model = reranker.model
    sep = token_id(";")
    fmt = PairFormat(add_bos=True, add_eos=True, add_sep=True, sep=sep)
    q, d = tokenize("ab", bos=False), tokenize("cd", bos=False)
    assert pair_tokens(model, "ab", "cd", fmt, 256, True) == [BOS, *q, EOS, sep, *d, EOS]
    assert pair_tokens(model, "ab", "cd", PairFormat(add_bos=False), 256, True) == [*q, *d]
    # A long document loses its end, the closing EOS stays.
    assert pair_tokens(model, "ab", "cdcdcd", fmt, 9, True) == [
        BOS,
        *q,
        EOS,
        sep,
        *d,
        token_id("c"),
        EOS,
    ]
    with pytest.raises(InvalidRequest, match="context"):
        pair_tokens(model, "ab", "cdcdcd", fmt, 9, False)
    with pytest.raises(InvalidRequest, match="context"):
        pair_tokens(model, "abcdefgh", "cd", fmt, 9, True)


def test_a_templated_pair_is_cut_in_the_document(reranker: Engine) -> None:
    model = reranker.model
    fmt = PairFormat(template=TEMPLATE)
    toks = pair_tokens(model, "find x", "xy" * 50, fmt, 30, True)
    assert len(toks) == 30 and toks[-1] == token_id(".")
    assert toks == pair_ids("find x", ("xy" * 50)[: 30 - len(pair_ids("find x", ""))])
    with pytest.raises(InvalidRequest, match="template alone"):
        pair_tokens(model, "q" * 40, "x", fmt, 30, True)


def test_fill_is_one_pass() -> None:
    assert fill("<{query}|{document}>", "{document}", "D") == "<{document}|D>"
    assert fill("{document}{query}{query}", "Q", "D") == "DQQ"
    assert fill("plain", "Q", "D") == "plain"


def test_a_reranker_does_not_embed_and_an_embedder_does_not_rerank(
    reranker: Engine, tmp_path: Path
) -> None:
    with pytest.raises(InvalidRequest, match="reranker"):
        reranker.embed(["abc"])
    path = make_tiny_model(tmp_path, pooling="mean")
    with (
        Engine([str(path)], opts(embedding=True)) as e,
        pytest.raises(InvalidRequest, match="not loaded for reranking"),
    ):
        e.rerank("q", ["d"], PairFormat())


def test_rank_pooling_is_forced_by_the_load(tmp_path: Path) -> None:
    # A GGUF whose metadata names mean pooling but carries the head still reranks when
    # loaded for it (as llama-server's --reranking forces rank pooling).
    path = make_rerank_model(tmp_path, pooling="mean")
    with Engine([str(path)], opts(embedding=True, rerank=True)) as e:
        scores, _ = e.rerank("find x", ["xyz"], PairFormat(template=TEMPLATE))
    assert scores[0] == pytest.approx(expected_score(pair_ids("find x", "xyz")), abs=1e-3)


def test_pairs_reuse_the_prefix_a_slot_holds(
    reranker: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A causal reranker keeps each slot's last pair: the next pair sharing the template
    # and query evaluates its document only, as llama-server's slots do.
    fmt = PairFormat(template=TEMPLATE)
    evaluated: list[int] = []
    decode = reranker.ctx.decode

    def counting(batch: object) -> int:
        evaluated.append(len(batch))  # type: ignore[arg-type]
        return decode(batch)  # type: ignore[arg-type]

    monkeypatch.setattr(reranker.ctx, "decode", counting)
    docs = ["xyz", "abcabc", "zz", "hello", "y", "xay"]
    for query in ("find x", "other query", "find x"):
        evaluated.clear()
        scores, n = reranker.rerank(query, docs, fmt)
        assert scores == pytest.approx([expected_score(pair_ids(query, d)) for d in docs], abs=1e-3)
        assert n == sum(len(pair_ids(query, d)) for d in docs)  # usage counts whole pairs
    # In the last round the three slots first hold the other query's pairs; after the
    # first three pairs each finds "<s>q:find x;d:" in a slot and evaluates its document
    # and the closing "." only.
    shared = len(pair_ids("find x", ""))
    assert sum(evaluated) <= n - (len(docs) - 3) * (shared - 1)
    for slot in reranker.slots:
        assert slot.cache and reranker.ctx.seq_pos_min(slot.seq) == 0


def test_a_bidirectional_reranker_evaluates_each_pair_whole(tmp_path: Path) -> None:
    # BERT-style: no KV cache, the head on the first token, tanh then a logit; pairs laid
    # out as XLM-RoBERTa's (<s> q </s> </s> d </s>), read from the GGUF's tokenizer keys.
    from localllm.gguf.info import read_model_info
    from localllm.inference.rerank import pair_format

    path = make_bert_reranker(tmp_path)
    fmt = pair_format(read_model_info(path))
    assert fmt == PairFormat(add_bos=True, add_eos=True, add_sep=True, sep=EOS)
    docs = [("xyz" * (i % 3)) + "abc"[: i % 4] + "h" for i in range(20)]
    with Engine([str(path)], opts(n_parallel=3, embedding=True, rerank=True)) as e:
        scores, n = e.rerank("find x", docs, fmt)
        assert all(not s.cache for s in e.slots)  # nothing kept to reuse
        again, _ = e.rerank("find x", docs[:4], fmt)
    # Attention's values pass through float16 (flash attention): a few 1e-3 of a logit.
    assert scores == pytest.approx(
        [expected_bert_logit(bert_pair_ids("find x", d)) for d in docs], rel=5e-3
    )
    assert again == pytest.approx(scores[:4], abs=1e-5)
    assert n == sum(len(bert_pair_ids("find x", d)) for d in docs)
