"""``/api/generate``, ``/api/chat``, ``/api/embed``, ``/api/embeddings`` and ``/api/ps``.

Each generation route parses the body, builds the plan in a worker thread
(:mod:`localllm.inference.build`: the store lookup, validation, rendering) and
answers with what the plan yields, Ollama's response objects: streamed as
NDJSON (``stream: true``, the default) or folded into one JSON object.  An
empty request (no prompt, no messages) loads or unloads the model (see
:mod:`localllm.inference.plan`).  A client that disconnects, streaming or not,
before or after the first token, cancels the generation in the runner and
releases the scheduler slot (see :mod:`localllm.server.disconnect`).
"""

from __future__ import annotations

from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from localllm.api.schemas_infer import (
    ChatRequest,
    EmbeddingsRequest,
    EmbedRequest,
    GenerateRequest,
)
from localllm.api.wire import Chunk
from localllm.inference.build import chat_plan, generate_plan, require_model
from localllm.inference.embed import embed_native
from localllm.inference.generation import Generation
from localllm.server.deps import inference_service, offload, parse_json
from localllm.server.jsonout import json_response, json_result
from localllm.server.streaming import ndjson_response

router = APIRouter()
C = TypeVar("C", bound=Chunk)


async def _respond(request: Request, plan: Generation[C], stream: bool) -> Response:
    if stream:
        return await ndjson_response(plan.run(), request=request)
    return await json_result(request, plan.result())


@router.post("/api/generate")
async def generate(request: Request) -> Response:
    req = await parse_json(request, GenerateRequest)
    plan = await offload(request, generate_plan, inference_service(request), req)
    return await _respond(request, plan, req.stream)


@router.post("/api/chat")
async def chat(request: Request) -> Response:
    req = await parse_json(request, ChatRequest)
    plan = await offload(request, chat_plan, inference_service(request), req)
    return await _respond(request, plan, req.stream)


@router.post("/api/embed")
async def embed(request: Request) -> Response:
    req = await parse_json(request, EmbedRequest)
    svc = inference_service(request)
    require_model(req.model)
    target = await offload(request, svc.target, req.model)
    return await json_response(request, await embed_native(svc, req, target))


@router.post("/api/embeddings")
async def embeddings(request: Request) -> Response:
    req = await parse_json(request, EmbeddingsRequest)
    require_model(req.model)
    svc = inference_service(request)
    target = await offload(request, svc.target, req.model)
    if not req.prompt:
        return JSONResponse({"embedding": []})
    vectors, _, _ = await svc.embed(
        target, [req.prompt], truncate=True, options=req.options, keep_alive=req.keep_alive
    )
    return await json_response(request, {"embedding": vectors[0]})


@router.get("/api/ps")
async def ps(request: Request) -> Response:
    return JSONResponse({"models": inference_service(request).ps()})
