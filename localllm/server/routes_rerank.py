"""Rerank routes: ``/api/rerank`` (Ollama's style) and the paths rerank clients call.

- ``POST /v1/rerank`` (Jina's and Cohere's v1 path, which Open WebUI, RAGFlow and
  LangChain's rerankers call), ``/v2/rerank`` (Cohere's v2 client), and
  llama-server's ``/rerank``, ``/reranking``, ``/v1/reranking``: ``{id, object,
  model, results, usage}``, or Text Embeddings Inference's bare list for a body
  with ``texts`` (as llama-server answers at the same paths).
- ``POST /api/rerank``: the same body and ``results``, with Ollama's
  ``total_duration``, ``load_duration`` and ``prompt_eval_count`` (as
  ``/api/embed``); errors as Ollama's ``{"error"}``.

Parse and check (``compat/rerank.py``) -> the model, checked to have a rank head
(``inference/rerank.py``), in a worker thread -> the pairs scored in the model's
runner -> sorted and cut to ``top_n``.  A client that leaves cancels the rest.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localllm.api.wire import RerankNative, RerankResponse
from localllm.compat.rerank import RerankBody, RerankCall, rerank_call, results, tei_results
from localllm.inference.rerank import Scored, rerank, rerank_target
from localllm.server.deps import inference_service, offload, parse_json
from localllm.server.jsonout import json_result

router = APIRouter()
PATHS = ("/v1/rerank", "/v2/rerank", "/rerank", "/reranking", "/v1/reranking")


async def _prepared(request: Request) -> tuple[RerankBody, RerankCall]:
    body = await parse_json(request, RerankBody)
    # Thousands of documents are checked in a thread, each text once.
    return body, await offload(request, rerank_call, body)


async def _scored(request: Request, body: RerankBody, call: RerankCall) -> Scored:
    svc = inference_service(request)
    target = await offload(request, rerank_target, svc, call.model)
    return await rerank(
        svc,
        target,
        call.query,
        call.documents,
        truncate=call.truncate,
        raw=call.raw,
        options=body.options,
        keep_alive=body.keep_alive,
    )


@router.post("/api/rerank")
async def api_rerank(request: Request) -> Response:
    start = time.monotonic_ns()
    body, call = await _prepared(request)

    def shape(scored: Scored) -> RerankNative:
        return {
            "model": call.model,
            "results": results(call, scored.scores),
            "total_duration": time.monotonic_ns() - start,
            "load_duration": scored.load_ns,
            "prompt_eval_count": scored.n_tokens,
        }

    return await json_result(request, _scored(request, body, call), shape)


async def v1_rerank(request: Request) -> Response:
    body, call = await _prepared(request)

    def shape(scored: Scored) -> Any:
        if call.tei:
            return tei_results(call, scored.scores)
        out: RerankResponse = {
            "id": f"rerank-{uuid.uuid4().hex}",
            "object": "list",
            "model": call.model,
            "results": results(call, scored.scores),
            "usage": {"prompt_tokens": scored.n_tokens, "total_tokens": scored.n_tokens},
        }
        return out

    return await json_result(request, _scored(request, body, call), shape)


for _path in PATHS:
    router.add_api_route(_path, v1_rerank, methods=["POST"])
