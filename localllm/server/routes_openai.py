"""OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/models`` and ``/v1/models/{model}``.

Thin converters: :mod:`localllm.compat.openai_chat` turns the body into a native
request, :mod:`localllm.server.native` runs it exactly as ``/api/chat`` or
``/api/generate`` would (``n`` choices run concurrently, see
:mod:`localllm.server.fanout`), and :mod:`localllm.compat.openai_responses`
shapes the chunks back.  Streams are server-sent events ending with
``data: [DONE]``; a failure after the first event is sent as an
``{"error": {...}}`` event and the stream ends without ``[DONE]``.  Errors
before it keep their HTTP status in OpenAI's shape (the app's handlers do that
for every path under ``/v1/``).  A client that disconnects, streaming or not,
cancels every choice's generation (see :mod:`localllm.server.streaming`).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import RootModel

from localllm.api.schemas_infer import ChatRequest, EmbedRequest, GenerateRequest
from localllm.compat.openai_chat import (
    SSE_DONE,
    ChatConversion,
    chat_request_to_native,
    completion_request_to_native,
    embedding_request_to_native,
    embeddings_response,
    error_from_exception,
    model_object,
    models_list,
    sse,
)
from localllm.compat.openai_responses import (
    ChatStream,
    CompletionStream,
    chat_completion,
    text_completion,
)
from localllm.errors import InvalidRequest, ModelNotFound
from localllm.inference.fanout import gather, merge
from localllm.inference.plan import (
    Plan,
    chat_plan,
    embed_native,
    fim_prompt,
    fold,
    generate_plan,
)
from localllm.inference.release import dismantle
from localllm.inference.service import InferenceService
from localllm.server.deps import inference_service, model_service, offload, parse_json, validate
from localllm.server.jsonout import json_response
from localllm.server.streaming import (
    ClientGone,
    first_of,
    gone_response,
    guarded,
    until_disconnect,
)
from localllm.store.names import parse_name

log = logging.getLogger(__name__)
router = APIRouter()
Body = RootModel[dict[str, Any]]
Streamer = ChatStream | CompletionStream


async def _body(request: Request) -> dict[str, Any]:
    return (await parse_json(request, Body)).root


async def _replay(chunks: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for chunk in chunks:
        yield chunk


async def _final(request: Request, plan: Plan, n: int, chat: bool) -> list[dict[str, Any]]:
    """Every choice, folded; raises ``ClientGone`` (all choices cancelled) if the client leaves."""
    runs = await until_disconnect(
        request, gather([plan.events(plan.prepare(i)) for i in range(n)]))
    return [await fold(_replay(chunks), chat) for chunks in runs]


async def _sse(request: Request, plan: Plan, n: int, include_usage: bool,
               make: Callable[..., Streamer]) -> Response:
    """Stream ``n`` runs of ``plan`` as SSE; the first chunk is awaited before answering,
    so a full queue (503) or a failed load still gets its HTTP status."""
    ident = secrets.token_hex(12)
    created = int(time.time())
    streams: Sequence[Streamer] = [make(id=ident, created=created, index=i) for i in range(n)]
    merged = guarded(merge([plan.events(plan.prepare(i)) for i in range(n)]), request)
    try:
        first = await first_of(merged)
    except ClientGone:
        return gone_response()

    async def body() -> AsyncIterator[str]:
        prompt, completion = 0, 0
        try:
            pending = [first] if first is not None else []
            while True:
                for index, native in pending:
                    for chunk in streams[index].feed(native):
                        yield sse(chunk)
                    if native.get("done"):
                        prompt = prompt or int(native.get("prompt_eval_count") or 0)
                        completion += int(native.get("eval_count") or 0)
                try:
                    pending = [await merged.__anext__()]
                except StopAsyncIteration:
                    break
            if include_usage:
                yield sse(streams[0].usage_chunk(prompt, completion))
            yield SSE_DONE
        except ClientGone:
            pass  # nobody to tell
        except Exception as exc:
            if not isinstance(exc, InvalidRequest):
                log.warning("%s stream failed: %s", type(streams[0]).__name__, exc)
            yield sse(error_from_exception(exc)[1])
        finally:
            await merged.aclose()

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _chat_build(svc: InferenceService, body: dict[str, Any]) -> tuple[Plan, ChatConversion]:
    """Convert, validate and plan (a worker thread's work: see ``deps.offload``)."""
    conv = chat_request_to_native(body)
    if not conv.native["messages"]:
        raise InvalidRequest("messages must be a non-empty array")
    req = validate(ChatRequest, conv.native)
    forced = req.tools and conv.tool_choice == "required"
    plan = chat_plan(svc, req, forced_tools=conv.native["tools"] if forced else None)
    return plan, conv


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    plan, conv = await offload(request, _chat_build, inference_service(request),
                               await _body(request))
    model = plan.model
    if conv.stream:
        return await _sse(request, plan, conv.n, conv.include_usage,
                          lambda **kw: ChatStream(model, **kw))
    try:
        natives = await _final(request, plan, conv.n, True)
    except ClientGone:
        return gone_response()
    return await json_response(request, chat_completion(natives, model=model))


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    conv = completion_request_to_native(await _body(request))
    req = validate(GenerateRequest, conv.native)
    svc = inference_service(request)
    target = await offload(request, svc.target, req.model)
    fim = await fim_prompt(svc, target, req)
    plan = await offload(request, generate_plan, svc, target, req, fim)
    model = req.model
    if conv.stream:
        return await _sse(request, plan, conv.n, conv.include_usage,
                          lambda **kw: CompletionStream(model, **kw))
    try:
        natives = await _final(request, plan, conv.n, False)
    except ClientGone:
        return gone_response()
    if conv.echo:
        for native in natives:
            native["response"] = req.prompt + native.get("response", "")
    return await json_response(request, text_completion(natives, model=model))


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    native, encoding = embedding_request_to_native(await _body(request))
    req = validate(EmbedRequest, native)
    if not req.model:
        raise InvalidRequest("model is required")
    svc = inference_service(request)
    box = [await embed_native(svc, req, await offload(request, svc.target, req.model))]
    # Base64 packing (encoding_format) walks every float: in a thread too, which also
    # takes the only reference to the native result (see jsonout.json_response).
    return await json_response(request, await offload(
        request, _openai_embeddings, box, req.model, encoding))


def _openai_embeddings(box: list[dict[str, Any]], model: str, encoding: str) -> dict[str, Any]:
    native = box.pop()
    doc = embeddings_response(native, model, encoding)
    dismantle(native)  # rows packed as base64 are freed here a row at a time
    return doc


@router.get("/v1/models")
def list_models(request: Request) -> dict[str, Any]:
    entries: list[Mapping[str, Any]] = list(model_service(request).list_models())
    return models_list(entries)


@router.get("/v1/models/{model:path}")
def get_model(model: str, request: Request) -> dict[str, Any]:
    wanted = parse_name(model).display
    for entry in model_service(request).list_models():
        if entry["name"] == wanted:
            return model_object(entry)
    raise ModelNotFound(f"model '{model}' not found")
