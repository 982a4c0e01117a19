"""Rerank through the real daemon and the tiny rerankers: exact scores, every shape, real clients.

``rr`` is tests/support/rerankmodel.py's (causal, qwen3) reranker with its pair template in
the GGUF, ``rr-plain`` the same without one (llama-server's layout), ``rr-bert`` the
bidirectional one (a BERT with bge-reranker's head, XLM-RoBERTa's pair layout, a
logit for a score), ``rr-headless`` rank pooling without a head, ``tiny`` a
generative model and ``tiny-embed`` an embedding model.  Every score is checked
against the expected score of the exact tokens the pair should become, so the pair
format, the head, the batching of pairs over the slots (no pair sees another's
tokens) and the order are all proven at once.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm import paths
from localllm.compat.rerank import MAX_DOCUMENTS
from localllm.inference.rerank import CHUNK
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, own_daemon
from tests.support.models import import_gguf
from tests.support.rerankmodel import (
    bert_pair_ids,
    expected_bert_logit,
    expected_score,
    make_bert_reranker,
    make_rerank_model,
    pair_ids,
)
from tests.support.tinymodel import make_tiny_model

QUERY = "find x"
DOCS = ["abc", "xyz", "axbyc", "hello", "zzzz zz"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    def stock(tmp: Path) -> None:
        store = Store(paths.models())
        import_gguf(store, parse_name("rr"), [make_rerank_model(tmp / "rr")])
        import_gguf(
            store, parse_name("rr-plain"), [make_rerank_model(tmp / "plain", template=None)]
        )
        import_gguf(store, parse_name("rr-bert"), [make_bert_reranker(tmp / "bert")])
        import_gguf(
            store, parse_name("rr-headless"), [make_rerank_model(tmp / "headless", head=False)]
        )
        import_gguf(store, parse_name("tiny"), [make_tiny_model(tmp / "tiny")])
        import_gguf(
            store, parse_name("tiny-embed"), [make_tiny_model(tmp / "embed", pooling="mean")]
        )

    # The context is a chat's: a reranker takes num_batch.
    with own_daemon(
        tmp_path_factory,
        "rerank-daemon",
        stock,
        LOCALLLM_CONTEXT_LENGTH="8192",
        LOCALLLM_NUM_PARALLEL="4",
    ) as d:
        yield d


def post(d: Daemon, path: str, body: Any) -> httpx.Response:
    # json.dumps escapes a lone surrogate, which httpx's own encoding refuses to send.
    return httpx.post(
        d.url + path,
        content=json.dumps(body),
        timeout=120,
        headers={"Content-Type": "application/json"},
    )


def expected(docs: list[str], template: bool = True) -> list[tuple[int, float]]:
    """(index, score) best first, as the model must rank ``docs`` for ``QUERY``."""
    scores = [
        expected_score(pair_ids(QUERY, d) if template else pair_ids(QUERY, d, None)) for d in docs
    ]
    return sorted(enumerate(scores), key=lambda p: -p[1])


def check_results(
    results: list[dict[str, Any]],
    docs: list[str],
    *,
    template: bool = True,
    key: str = "relevance_score",
) -> None:
    """Each result scores as its own pair should, best first; where the expected scores
    stand apart (identical pairs may differ in the last float32 bits), in their order."""
    want = expected(docs, template)
    score = dict(want)
    got = [r[key] for r in results]
    assert got == sorted(got, reverse=True)
    for r in results:
        assert r[key] == pytest.approx(score[r["index"]], abs=1e-3)
    if all(a[1] - b[1] > 1e-3 for a, b in itertools.pairwise(want)):
        assert [r["index"] for r in results] == [i for i, _ in want][: len(results)]
    else:
        assert len({r["index"] for r in results}) == len(results) == len(docs)


def test_v1_rerank_orders_by_the_heads_score(daemon: Daemon) -> None:
    r = post(daemon, "/v1/rerank", {"model": "rr", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "object", "model", "results", "usage"}
    assert body["id"].startswith("rerank-") and body["object"] == "list"
    assert body["model"] == "rr"
    check_results(body["results"], DOCS)
    assert [set(x) for x in body["results"]] == [{"index", "relevance_score"}] * len(DOCS)
    # "xyz" and "zzzz zz" first, "hello" last: the share of x/y/z letters decides.
    assert [DOCS[x["index"]] for x in body["results"]][:2] == ["zzzz zz", "xyz"]
    n = sum(len(pair_ids(QUERY, d)) for d in DOCS)
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_top_n_documents_and_object_documents(daemon: Daemon) -> None:
    docs: list[Any] = [{"text": d} for d in DOCS]
    r = post(
        daemon,
        "/v1/rerank",
        {"model": "rr", "query": QUERY, "documents": docs, "top_n": 2, "return_documents": True},
    )
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 2
    check_results(results, DOCS)
    assert [x["document"] for x in results] == [{"text": DOCS[x["index"]]} for x in results]
    # 0 (vLLM's "all") and more than there are documents: every document.
    for top_n in (0, 10**12):
        r = post(
            daemon, "/v1/rerank", {"model": "rr", "query": QUERY, "documents": DOCS, "top_n": top_n}
        )
        assert r.status_code == 200 and len(r.json()["results"]) == len(DOCS), r.text


def test_api_rerank_has_ollamas_timings(daemon: Daemon) -> None:
    r = post(daemon, "/api/rerank", {"model": "rr", "query": QUERY, "documents": DOCS, "top_n": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"model", "results", "total_duration", "load_duration", "prompt_eval_count"}
    check_results(body["results"], DOCS)
    assert len(body["results"]) == 3
    assert body["prompt_eval_count"] == sum(len(pair_ids(QUERY, d)) for d in DOCS)
    assert body["total_duration"] >= body["load_duration"] >= 0


def test_llama_server_and_tei_shapes(daemon: Daemon) -> None:
    for path in ("/rerank", "/reranking", "/v1/reranking", "/v2/rerank"):
        r = post(daemon, path, {"model": "rr", "query": QUERY, "documents": DOCS})
        assert r.status_code == 200, (path, r.text)
        check_results(r.json()["results"], DOCS)
    r = post(daemon, "/rerank", {"model": "rr", "query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    tei = r.json()
    assert isinstance(tei, list) and [set(x) for x in tei] == [{"index", "score", "text"}] * 5
    check_results(tei, DOCS, key="score")
    assert [x["text"] for x in tei] == [DOCS[x["index"]] for x in tei]


def test_a_model_without_a_template_gets_llama_servers_layout(daemon: Daemon) -> None:
    r = post(daemon, "/v1/rerank", {"model": "rr-plain", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    check_results(r.json()["results"], DOCS, template=False)


def test_a_bert_reranker_scores_the_sigmoid_of_its_logit(daemon: Daemon) -> None:
    # Its pairs are <s> q </s> </s> d </s> (the GGUF's add_bos/eos/sep and separator).
    logits = [expected_bert_logit(bert_pair_ids(QUERY, d)) for d in DOCS]
    r = post(daemon, "/v1/rerank", {"model": "rr-bert", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    got = {x["index"]: x["relevance_score"] for x in r.json()["results"]}
    assert [got[i] for i in range(len(DOCS))] == pytest.approx(
        [1 / (1 + math.exp(-x)) for x in logits], abs=1e-3
    )
    assert r.json()["usage"]["prompt_tokens"] == sum(len(bert_pair_ids(QUERY, d)) for d in DOCS)
    assert [x["index"] for x in r.json()["results"]] == sorted(
        range(len(DOCS)), key=lambda i: -logits[i]
    )
    raw = post(
        daemon, "/rerank", {"model": "rr-bert", "query": QUERY, "texts": DOCS, "raw_scores": True}
    ).json()
    assert {x["index"]: x["score"] for x in raw} == pytest.approx(dict(enumerate(logits)), rel=5e-3)
    assert post(daemon, "/api/show", {"model": "rr-bert"}).json()["capabilities"] == ["rerank"]


def test_many_pairs_batch_over_the_slots_and_score_alone(daemon: Daemon) -> None:
    # More pairs than one runner call takes, of many lengths: each must score as it does
    # alone (the tiny model's score depends on its own tokens only).
    docs = [("xy" * (i % 7)) + "ab" * (i % 5) + "c" for i in range(CHUNK + 45)]
    r = post(daemon, "/v1/rerank", {"model": "rr", "query": QUERY, "documents": docs})
    assert r.status_code == 200, r.text
    check_results(r.json()["results"], docs)


def test_a_long_document_is_cut_to_fit_unless_truncate_is_false(daemon: Daemon) -> None:
    # num_ctx 64: the pair keeps the template's closing text.
    long = "ab" * 100
    small = {"num_ctx": 64}
    r = post(
        daemon,
        "/v1/rerank",
        {"model": "rr", "query": QUERY, "documents": [long, "x"], "options": small},
    )
    assert r.status_code == 200, r.text
    cut = next(x for x in r.json()["results"] if x["index"] == 0)
    kept = long[: 64 - len(pair_ids(QUERY, ""))]
    assert len(pair_ids(QUERY, kept)) == 64
    assert cut["relevance_score"] == pytest.approx(expected_score(pair_ids(QUERY, kept)), abs=1e-3)
    r = post(
        daemon,
        "/v1/rerank",
        {"model": "rr", "query": QUERY, "documents": [long], "truncate": False, "options": small},
    )
    assert r.status_code == 400 and "context" in r.json()["error"]["message"]
    r = post(
        daemon,
        "/api/rerank",
        {
            "model": "rr-plain",
            "query": QUERY,
            "documents": [long],
            "truncate": False,
            "options": small,
        },
    )
    assert r.status_code == 400 and "context" in r.json()["error"]
    # Without num_ctx a slot holds num_batch (512) tokens, whatever LOCALLLM_CONTEXT_LENGTH.
    r = post(
        daemon,
        "/v1/rerank",
        {"model": "rr", "query": QUERY, "documents": ["ab" * 240], "truncate": False},
    )
    assert r.status_code == 200, r.text
    ps = {
        m["name"].split(":")[0]: m
        for m in httpx.get(daemon.url + "/api/ps", timeout=30).json()["models"]
    }
    assert ps["rr"]["context_length"] == 512


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"documents": DOCS}, "query"),
        ({"query": QUERY}, "documents"),
        ({"query": QUERY, "documents": []}, "documents"),
        ({"query": QUERY, "documents": ["x"] * 10_000}, f"at most {MAX_DOCUMENTS}"),
        ({"query": QUERY, "documents": DOCS, "top_n": -1}, "top_n"),
        ({"query": QUERY, "documents": [1, 2]}, "documents"),
        ({"query": QUERY, "documents": DOCS, "top_n": 1.5}, "top_n"),
        ({"query": ["x"], "documents": DOCS}, "query"),
        ({"query": QUERY, "documents": ["a\ud800"]}, "Unicode"),
    ],
)
def test_bad_bodies_are_400s(daemon: Daemon, body: dict[str, Any], says: str) -> None:
    start = time.monotonic()
    for path in ("/api/rerank", "/v1/rerank"):
        r = post(daemon, path, {"model": "rr", **body})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert says in (err if path.startswith("/api") else err["message"]), r.text
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("model", ["tiny", "tiny-embed", "rr-headless"])
def test_a_model_without_a_head_is_refused(daemon: Daemon, model: str) -> None:
    r = post(daemon, "/v1/rerank", {"model": model, "query": QUERY, "documents": DOCS})
    assert r.status_code == 400, r.text
    assert "no classification head" in r.json()["error"]["message"]
    # Nothing was loaded for it.
    loaded = httpx.get(daemon.url + "/api/ps", timeout=30).json()["models"]
    assert model not in {m["name"].split(":")[0] for m in loaded}


def test_missing_model_and_unknown_model(daemon: Daemon) -> None:
    r = post(daemon, "/api/rerank", {"query": QUERY, "documents": DOCS})
    assert r.status_code == 400 and "model" in r.json()["error"]
    r = post(daemon, "/v1/rerank", {"model": "nope", "query": QUERY, "documents": DOCS})
    assert r.status_code == 404, r.text


def test_show_lists_rerank_and_embed_refuses_a_reranker(daemon: Daemon) -> None:
    caps = post(daemon, "/api/show", {"model": "rr"}).json()["capabilities"]
    assert caps == ["rerank"]
    assert post(daemon, "/api/show", {"model": "tiny-embed"}).json()["capabilities"] == [
        "embedding"
    ]
    r = post(daemon, "/api/embed", {"model": "rr", "input": "abc"})
    assert r.status_code == 400 and "reranker" in r.json()["error"]
    # The daemon still serves the model afterwards.
    r = post(daemon, "/v1/rerank", {"model": "rr", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text


def test_cohere_sdk(daemon: Daemon) -> None:
    cohere = pytest.importorskip("cohere")
    http = daemon.keep(httpx.Client(timeout=120))  # the SDK's own is never closed
    client = cohere.Client(api_key="x", base_url=daemon.url, max_retries=0, httpx_client=http)
    got = client.rerank(model="rr", query=QUERY, documents=DOCS, top_n=3, return_documents=True)
    check_results(
        [{"index": r.index, "relevance_score": r.relevance_score} for r in got.results], DOCS
    )
    assert [r.document.text for r in got.results] == [DOCS[r.index] for r in got.results]
    v2 = cohere.ClientV2(api_key="x", base_url=daemon.url, max_retries=0, httpx_client=http)
    got2 = v2.rerank(model="rr", query=QUERY, documents=DOCS)
    check_results(
        [{"index": r.index, "relevance_score": r.relevance_score} for r in got2.results], DOCS
    )


def test_cli_rerank(daemon: Daemon) -> None:
    out = daemon.cli("rerank", "rr", QUERY, *DOCS, "--top", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["SCORE", "#", "DOCUMENT"]
    rows = [line.split(None, 2) for line in lines[1:]]
    want = expected(DOCS)[:2]
    assert [(int(i), doc) for _, i, doc in rows] == [(i, DOCS[i]) for i, _ in want]
    assert [float(s) for s, _, _ in rows] == pytest.approx([s for _, s in want], abs=2e-3)
    bad = daemon.cli("rerank", "tiny", QUERY, "a")
    assert bad.returncode != 0 and "classification head" in bad.stderr
    chat = daemon.cli("run", "rr", "hello")
    assert chat.returncode != 0 and "localllm rerank rr QUERY" in chat.stderr
