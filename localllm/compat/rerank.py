"""The rerank APIs clients speak, to and from one call: Jina/Cohere, TEI, Ollama style.

Request (every route takes the same body; unknown fields are ignored):

- Jina and Cohere (``/v1/rerank``; llama-server's and vLLM's too): ``query``,
  ``documents`` (strings, or objects with a ``text``), ``top_n``,
  ``return_documents`` -> ``{id, object, model, results: [{index,
  relevance_score, document?: {text}}], usage}``.
- Text Embeddings Inference (a body with ``texts`` instead of ``documents``, as
  llama-server tells them apart): ``return_text`` -> a bare list of ``{index,
  score, text?}``.
- Ours and Ollama's conventions: ``truncate`` (default true: a long document
  loses its end), ``raw_scores`` (TEI's: the head's output as it is, which is
  what llama-server returns), ``keep_alive``, ``options``.

Results are sorted by score, highest first (ties keep the request's order), and
cut to ``top_n``: absent, ``0`` (as vLLM) or more than the documents means all;
negative is a 400.  Checked here, before anything loads: a query, a non-empty
list of at most ``MAX_DOCUMENTS`` documents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, JsonValue, StrictBool, StrictInt, StrictStr

from localllm.api.wire import RerankDocument, RerankResult, TeiRank
from localllm.errors import InvalidRequest, LocalLLMError

# Documents one request may rank.  RAGFlow reranks its top 1024 retrieved chunks in one
# call; past a few thousand a client is better served by its own batches (each pair is
# a forward pass of the model).
MAX_DOCUMENTS = 4096


class TextDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: StrictStr


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    query: StrictStr | None = None
    documents: list[StrictStr | TextDocument] | None = None
    texts: list[StrictStr] | None = None  # TEI
    top_n: StrictInt | None = None
    return_documents: StrictBool = False
    return_text: StrictBool = False  # TEI
    raw_scores: StrictBool = False  # TEI
    truncate: StrictBool = True
    keep_alive: int | float | str | None = None
    options: dict[str, JsonValue] | None = None


@dataclass(frozen=True)
class RerankCall:
    """What every rerank API asks for, checked."""

    model: str
    query: str
    documents: list[str]
    top_n: int  # results to give back, at most len(documents)
    tei: bool  # answer in TEI's shape
    return_documents: bool
    raw: bool
    truncate: bool


def rerank_call(body: RerankBody) -> RerankCall:
    """``body`` checked and read as one call; ``InvalidRequest`` for what cannot rank."""
    if not body.model:
        raise InvalidRequest("model is required")
    if body.query is None:
        raise InvalidRequest('"query" is required: the text the documents are ranked for')
    tei = body.texts is not None and body.documents is None
    docs = body.texts if tei else body.documents
    if not docs:
        raise InvalidRequest('"documents" must be a non-empty list of texts')
    if len(docs) > MAX_DOCUMENTS:
        raise InvalidRequest(
            f"{len(docs)} documents; at most {MAX_DOCUMENTS} can be ranked "
            "in one request (rank them in batches)"
        )
    top_n = body.top_n
    if top_n is not None and top_n < 0:
        raise InvalidRequest("top_n must be a positive number of results (0 or none: all)")
    texts = [d if isinstance(d, str) else d.text for d in docs]
    for i, text in enumerate(texts):
        _check_text(text, f"document {i}")
    _check_text(body.query, "query")
    return RerankCall(
        model=body.model,
        query=body.query,
        documents=texts,
        top_n=len(texts) if not top_n else min(top_n, len(texts)),
        tei=tei,
        return_documents=body.return_text if tei else body.return_documents,
        raw=body.raw_scores,
        truncate=body.truncate,
    )


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{what} is not valid Unicode (it holds a lone surrogate)") from None


def ranking(scores: Sequence[float], top_n: int) -> list[int]:
    """The documents' indices, highest score first (a tie keeps the request's order),
    the first ``top_n``."""
    for i, s in enumerate(scores):
        if not math.isfinite(s):  # a broken model: no order to give, nor JSON for it
            raise LocalLLMError(f"the model scored document {i} as {s}")
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n]


def results(call: RerankCall, scores: Sequence[float]) -> list[RerankResult]:
    """Jina's and Cohere's ``results``."""
    out: list[RerankResult] = []
    for i in ranking(scores, call.top_n):
        item: RerankResult = {"index": i, "relevance_score": scores[i]}
        if call.return_documents:
            doc: RerankDocument = {"text": call.documents[i]}
            item["document"] = doc
        out.append(item)
    return out


def tei_results(call: RerankCall, scores: Sequence[float]) -> list[TeiRank]:
    """Text Embeddings Inference's answer."""
    out: list[TeiRank] = []
    for i in ranking(scores, call.top_n):
        item: TeiRank = {"index": i, "score": scores[i]}
        if call.return_documents:
            item["text"] = call.documents[i]
        out.append(item)
    return out
