"""``/api/generate``, ``/api/chat``, ``/api/embed``, ``/api/embeddings`` and ``/api/ps``.

Routes validate and run the request through :mod:`localllm.server.native`
(shared with the ``/v1`` routes), which shapes the runner's events into Ollama's
response objects: streamed as NDJSON (``stream: true``, the default) or folded
into one JSON object.  A client that disconnects, streaming or not, before or
after the first token, cancels the generation in the runner and releases the
scheduler slot (see :mod:`localllm.server.streaming`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from localllm.api.schemas_infer import (
    ChatRequest,
    EmbeddingsRequest,
    EmbedRequest,
    GenerateRequest,
)
from localllm.errors import InvalidRequest
from localllm.inference.plan import (
    chat_plan,
    check_top_logprobs,
    embed_native,
    fim_prompt,
    fold,
    generate_plan,
)
from localllm.inference.service import now_rfc3339
from localllm.server.deps import inference_service, offload, parse_json
from localllm.server.jsonout import json_response
from localllm.server.streaming import (
    ClientGone,
    gone_response,
    ndjson_response,
    until_disconnect,
)

router = APIRouter()


def _require_model(model: str) -> None:
    if not model:
        raise InvalidRequest("model is required")


async def _respond(request: Request, events: AsyncIterator[dict[str, Any]], stream: bool,
                   chat: bool) -> Response:
    if stream:
        return await ndjson_response(events, request=request)
    try:
        return await json_response(request, await until_disconnect(request, fold(events, chat)))
    except ClientGone:
        return gone_response()


def _load_reply(model: str, reason: str, chat: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "created_at": now_rfc3339()}
    if chat:
        body["message"] = {"role": "assistant", "content": ""}
    else:
        body["response"] = ""
    body.update({"done": True, "done_reason": reason})
    return body


@router.post("/api/generate")
async def generate(request: Request) -> Response:
    req = await parse_json(request, GenerateRequest)
    _require_model(req.model)
    check_top_logprobs(req.top_logprobs)
    svc = inference_service(request)
    target = await offload(request, svc.target, req.model)
    if req.raw and (req.template or req.system or req.context):
        raise InvalidRequest("raw mode does not support template, system, or context")
    if req.template:
        raise InvalidRequest(
            "per-request Go templates are not supported; the model's own chat template is used")
    if not req.prompt and not req.suffix and not req.images:
        reason = await svc.load_only(target, req.options, req.keep_alive)
        return await _respond(request, _single(_load_reply(req.model, reason, False)),
                              req.stream, False)
    fim = await fim_prompt(svc, target, req)
    plan = await offload(request, generate_plan, svc, target, req, fim)
    return await _respond(request, plan.events(plan.prepare()), req.stream, False)


async def _single(body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield body


@router.post("/api/chat")
async def chat(request: Request) -> Response:
    req = await parse_json(request, ChatRequest)
    _require_model(req.model)
    svc = inference_service(request)
    if not req.messages:
        target = await offload(request, svc.target, req.model)
        reason = await svc.load_only(target, req.options, req.keep_alive)
        return await _respond(request, _single(_load_reply(req.model, reason, True)),
                              req.stream, True)
    plan = await offload(request, chat_plan, svc, req)
    return await _respond(request, plan.events(plan.prepare()), req.stream, True)


@router.post("/api/embed")
async def embed(request: Request) -> Response:
    req = await parse_json(request, EmbedRequest)
    svc = inference_service(request)
    _require_model(req.model)
    target = await offload(request, svc.target, req.model)
    return await json_response(request, await embed_native(svc, req, target))


@router.post("/api/embeddings")
async def embeddings(request: Request) -> Response:
    req = await parse_json(request, EmbeddingsRequest)
    _require_model(req.model)
    svc = inference_service(request)
    target = await offload(request, svc.target, req.model)
    if not req.prompt:
        return JSONResponse({"embedding": []})
    vectors, _, _ = await svc.embed(target, [req.prompt], truncate=True,
                                    options=req.options, keep_alive=req.keep_alive)
    return await json_response(request, {"embedding": vectors[0]})


@router.get("/api/ps")
async def ps(request: Request) -> Response:
    return JSONResponse({"models": inference_service(request).ps()})

