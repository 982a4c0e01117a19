"""OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/models`` and ``/v1/models/{model}``.

Thin converters: :mod:`localllm.compat.openai.request` turns the body into a
native request and :mod:`localllm.server.foreign` plans it exactly as
``/api/chat`` or ``/api/generate`` would (in worker threads), the plan runs
it (``n`` choices at once, see :mod:`localllm.inference.fanout`), and
:mod:`localllm.compat.openai.response` / :mod:`localllm.compat.openai.stream`
shape the chunks back.  Streams are server-sent events ending with
``data: [DONE]``; a failure after the first event is sent as an
``{"error": {...}}`` event and the stream ends without ``[DONE]``.  Errors
before it keep their HTTP status in OpenAI's shape (the app's handlers do that
for every path under ``/v1/``).  A client that disconnects, streaming or not,
cancels every choice's generation (see :mod:`localllm.server.disconnect`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localllm.api.schemas_infer import EmbedRequest
from localllm.api.wire import EmbedResponse
from localllm.compat.frames import new_id
from localllm.compat.openai.request import (
    chat_request_to_native,
    completion_request_to_native,
    embedding_request_to_native,
)
from localllm.compat.openai.response import (
    chat_completion,
    embeddings_response,
    model_object,
    models_list,
    text_completion,
)
from localllm.compat.openai.stream import ChatStream, CompletionStream
from localllm.compat.openai.types import EmbeddingList, ModelList, ModelObject
from localllm.errors import InvalidRequest, ModelNotFound
from localllm.inference.embed import embed_native
from localllm.inference.release import dismantle
from localllm.server import foreign
from localllm.server.deps import inference_service, model_service, offload, parse_json, validate
from localllm.server.jsonout import json_response, json_result
from localllm.server.streaming import sse_response
from localllm.store.names import parse_name

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    plan, conv = await foreign.plan_request(
        request, chat_request_to_native, foreign.chat, object_only=True
    )
    if conv.stream:
        # The chunks' id is bare hex, as it always was (whole answers say "chatcmpl-").
        stream = ChatStream(plan.model, n=conv.n, include_usage=conv.include_usage, id=new_id(""))
        return await sse_response(request, plan.choices(conv.n), stream)
    return await json_result(
        request, plan.results(conv.n), lambda natives: chat_completion(natives, model=plan.model)
    )


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    plan, conv = await foreign.plan_request(
        request, completion_request_to_native, foreign.completion, object_only=True
    )
    if conv.stream:
        stream = CompletionStream(
            plan.model, n=conv.n, include_usage=conv.include_usage, id=new_id("")
        )
        return await sse_response(request, plan.choices(conv.n), stream)
    echo = conv.native["prompt"] if conv.echo else ""
    return await json_result(
        request,
        plan.results(conv.n),
        lambda natives: text_completion(natives, model=plan.model, echo=echo),
    )


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    body: Any = (await parse_json(request, foreign.ObjectBody)).root  # JSON, as parsed
    native, encoding = embedding_request_to_native(body)
    req = validate(EmbedRequest, native)
    if not req.model:
        raise InvalidRequest("model is required")
    svc = inference_service(request)
    box = [await embed_native(svc, req, await offload(request, svc.target, req.model))]
    # Base64 packing (encoding_format) walks every float: in a thread too, which also
    # takes the only reference to the native result (see jsonout.json_response).
    return await json_response(
        request, await offload(request, _openai_embeddings, box, req.model, encoding)
    )


def _openai_embeddings(box: list[EmbedResponse], model: str, encoding: str) -> EmbeddingList:
    native = box.pop()
    doc = embeddings_response(native, model, encoding)
    dismantle(native)  # rows packed as base64 are freed here a row at a time
    return doc


@router.get("/v1/models", response_model=None)  # typed for mypy, not re-validated
def list_models(request: Request) -> ModelList:
    return models_list(model_service(request).list_models())


@router.get("/v1/models/{model:path}", response_model=None)
def get_model(model: str, request: Request) -> ModelObject:
    wanted = parse_name(model).display
    for entry in model_service(request).list_models():
        if entry["name"] == wanted:
            return model_object(entry)
    raise ModelNotFound(f"model '{model}' not found")
