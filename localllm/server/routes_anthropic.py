"""Anthropic-compatible routes: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Thin converters, as :mod:`localllm.server.routes_openai` is:
:mod:`localllm.compat.anthropic_request` turns the body into an ``/api/chat``
request, :func:`localllm.inference.plan.chat_plan` runs it exactly as
``/api/chat`` would (template, tool-call and thinking parsers, scheduler), and
:mod:`localllm.compat.anthropic_stream` shapes the chunks back.  Streams are
Anthropic's server-sent events; the first native chunk is awaited before the
response starts, so a full queue or a failed load keeps its HTTP status, and a
failure after it is an ``error`` event.  Errors before that are Anthropic's
shape (the app's handlers do that for every path under ``/v1/messages``).  A
client that disconnects, streaming or not, cancels the generation (see
:mod:`localllm.server.streaming`).  ``anthropic-version`` and
``anthropic-beta`` headers are ignored.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import RootModel

from localllm.api.schemas_infer import ChatRequest
from localllm.compat.anthropic_request import messages_request_to_native
from localllm.compat.anthropic_stream import (
    MessageStream,
    error_event,
    message_object,
    sse_event,
)
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.inference.fanout import gather
from localllm.inference.plan import Plan, chat_plan, fold
from localllm.inference.service import InferenceService
from localllm.server.deps import inference_service, offload, parse_json, validate
from localllm.server.jsonout import json_response
from localllm.server.streaming import (
    ClientGone,
    first_of,
    gone_response,
    guarded,
    until_disconnect,
)

log = logging.getLogger(__name__)
router = APIRouter()
Body = RootModel[Any]


async def _plan(request: Request, *, count_only: bool = False) -> tuple[Plan, bool]:
    """The chat plan of this request's body, and whether it asked to stream."""
    body = (await parse_json(request, Body)).root
    return await offload(request, _build, inference_service(request), body, count_only)


def _build(svc: InferenceService, body: Any, count_only: bool) -> tuple[Plan, bool]:
    """Convert, validate and plan (a worker thread's work: see ``deps.offload``)."""
    conv = messages_request_to_native(body, count_only=count_only)
    req = validate(ChatRequest, conv.native)
    plan = chat_plan(svc, req, forced_tools=conv.forced_tools)
    plan.report_stop = True
    return plan, conv.stream


async def _replay(chunks: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for chunk in chunks:
        yield chunk


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    plan, stream = await _plan(request)
    if stream:
        return await _sse(request, plan)
    try:
        # ``gather`` closes the run inside its own task, so the scheduler slot is
        # released where it was taken, also when the client leaves.
        (chunks,) = await until_disconnect(request, gather([plan.events(plan.prepare())]))
    except ClientGone:
        return gone_response()
    return await json_response(
        request, message_object(await fold(_replay(chunks), True), model=plan.model))


async def _sse(request: Request, plan: Plan) -> Response:
    events = guarded(plan.events(plan.prepare()), request)
    try:
        first = await first_of(events)
    except ClientGone:
        return gone_response()
    stream = MessageStream(plan.model)

    async def body() -> AsyncIterator[str]:
        try:
            for name, data in stream.start():
                yield sse_event(name, data)
            native = first
            while native is not None:
                for name, data in stream.feed(native):
                    yield sse_event(name, data)
                native = await anext_or_none(events)
        except ClientGone:
            pass  # nobody to tell
        except Exception as exc:
            if not isinstance(exc, InvalidRequest):
                log.warning("messages stream failed: %s", exc)
            status = exc.status if isinstance(exc, LocalLLMError) else 500
            message = exc.message if isinstance(exc, LocalLLMError) else "internal error"
            yield sse_event(*error_event(status, message))
        finally:
            await events.aclose()

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


async def anext_or_none(events: Any) -> dict[str, Any] | None:
    try:
        item: dict[str, Any] = await events.__anext__()
    except StopAsyncIteration:
        return None
    return item


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """The prompt's token count as the model's tokenizer sees it (loads the model)."""
    plan, _ = await _plan(request, count_only=True)
    prep = plan.prepare()
    text = plan.prompt if isinstance(plan.prompt, str) else ""
    try:
        # add_special as the generation adds it (BOS), so this equals input_tokens.
        tokens = await until_disconnect(request, plan.svc.tokenize(
            plan.target, text, prep.load, prep.keep_alive, add_special=True))
    except ClientGone:
        return gone_response()
    return JSONResponse({"input_tokens": len(tokens)})
