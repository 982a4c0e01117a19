"""The pure parts of rerank: each tokenizer's pair layout, scores as probabilities, ranking.

The layouts follow llama.cpp's defaults per tokenizer (llama-vocab.cpp) and the
GGUF's own ``add_*_token`` keys; the real bge-reranker (XLM-RoBERTa, ``t5``
tokenizer), a BERT cross-encoder (``bert``) and Qwen3-Reranker (a template) are
written here as the metadata their converted GGUFs carry.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from localllm.compat.rerank import RerankBody, rerank_call, results, tei_results
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.gguf.info import ModelInfo
from localllm.inference.rerank import pair_format, probability
from localllm.runner.messages import PairFormat


def info(arch: str = "bert", **kv: Any) -> ModelInfo:
    return ModelInfo(
        architecture=arch,
        name="",
        file_type="F32",
        parameter_count=0,
        n_layers=1,
        n_embd=8,
        n_head=1,
        n_head_kv=1,
        head_dim_k=8,
        head_dim_v=8,
        context_length=512,
        n_vocab=250_002,
        layer_bytes=[0],
        output_bytes=0,
        token_embd_bytes=0,
        file_size=0,
        kv=kv,
        rank_head=True,
    )


def test_a_template_in_the_gguf_wins() -> None:
    qwen = info(
        "qwen3",
        **{
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": "qwen2",
            "tokenizer.chat_template.rerank": "<q>{query}<d>{document}",
        },
    )
    assert pair_format(qwen) == PairFormat(template="<q>{query}<d>{document}")


@pytest.mark.parametrize(
    ("kv", "want"),
    [
        # WordPiece (BERT cross-encoders): [CLS] q [SEP] d, as llama-server lays it out.
        (
            {"tokenizer.ggml.model": "bert"},
            PairFormat(add_bos=True, add_eos=False, add_sep=True, sep=102),
        ),
        # XLM-RoBERTa (bge-reranker-v2-m3): <s> q </s> </s> d </s>.
        (
            {
                "tokenizer.ggml.model": "t5",
                "tokenizer.ggml.add_bos_token": True,
                "tokenizer.ggml.add_eos_token": True,
                "tokenizer.ggml.add_sep_token": True,
                "tokenizer.ggml.seperator_token_id": 2,
            },
            PairFormat(add_bos=True, add_eos=True, add_sep=True, sep=2),
        ),
        # UGM's own defaults: no BOS, an EOS.
        ({"tokenizer.ggml.model": "t5"}, PairFormat(add_bos=False, add_eos=True, add_sep=False)),
        # RoBERTa BPE adds a separator; a separator id out of the vocabulary is none.
        (
            {
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.pre": "roberta-bpe",
                "tokenizer.ggml.seperator_token_id": 10**9,
            },
            PairFormat(add_bos=False, add_eos=False, add_sep=True, sep=-1),
        ),
        ({"tokenizer.ggml.model": "llama"}, PairFormat(add_bos=True)),
    ],
)
def test_llama_servers_layout_per_tokenizer(kv: dict[str, Any], want: PairFormat) -> None:
    assert pair_format(info(**kv)) == want


def test_scores_become_probabilities() -> None:
    assert probability(info("qwen3"), 0.25) == 0.25  # a softmax already
    assert probability(info("bert"), 0.0) == 0.5
    assert probability(info("bert"), 2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    assert probability(info("bert"), -2000.0) == 0.0  # no overflow either way
    assert probability(info("bert"), 2000.0) == 1.0


def call(**body: Any) -> Any:
    return rerank_call(RerankBody.model_validate({"model": "m", "query": "q", **body}))


def test_ranking_top_n_and_shapes() -> None:
    c = call(documents=["a", {"text": "b"}, "c"], top_n=2, return_documents=True)
    assert c.documents == ["a", "b", "c"] and c.top_n == 2 and not c.tei
    assert results(c, [0.1, 0.9, 0.5]) == [
        {"index": 1, "relevance_score": 0.9, "document": {"text": "b"}},
        {"index": 2, "relevance_score": 0.5, "document": {"text": "c"}},
    ]
    # Ties keep the request's order.
    assert [r["index"] for r in results(call(documents=["a", "b", "c"]), [0.5, 0.7, 0.5])] == [
        1,
        0,
        2,
    ]
    tei = call(texts=["a", "b"], return_text=True, raw_scores=True)
    assert tei.tei and tei.raw and tei.return_documents
    assert tei_results(tei, [-1.0, 3.0]) == [
        {"index": 1, "score": 3.0, "text": "b"},
        {"index": 0, "score": -1.0, "text": "a"},
    ]
    assert call(documents=["a"], top_n=0).top_n == 1
    assert call(documents=["a"], top_n=5).top_n == 1
    with pytest.raises(LocalLLMError, match="nan"):
        results(call(documents=["a", "b"]), [0.5, math.nan])


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"documents": []}, "non-empty"),
        ({}, "non-empty"),
        ({"documents": ["a"], "top_n": -1}, "top_n"),
        ({"documents": ["a"] * 10_000}, "at most 4096"),
        ({"documents": ["a\ud800"]}, "Unicode"),
    ],
)
def test_bad_calls(body: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        call(**body)
    with pytest.raises(InvalidRequest, match="query"):
        rerank_call(RerankBody.model_validate({"model": "m", "documents": ["a"]}))
    with pytest.raises(InvalidRequest, match="model"):
        rerank_call(RerankBody.model_validate({"query": "q", "documents": ["a"]}))
