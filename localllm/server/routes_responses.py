"""The OpenAI Responses API route: ``POST /v1/responses``.

A thin converter onto the chat path, like ``/v1/chat/completions``:
:mod:`localllm.compat.responses_request` turns the body into an ``/api/chat``
request, :func:`~localllm.inference.plan.chat_plan` runs it (templates, tool
and reasoning parsers, the scheduler), and
:mod:`localllm.compat.responses_stream` shapes the chunks into the
``response`` object or its event stream.  One generation per request (the
Responses API has no ``n``).  The daemon is stateless: nothing is stored and
``previous_response_id`` is refused (see docs/api.md).

Errors before the stream starts keep their HTTP status in OpenAI's shape (the
app's handlers do that under ``/v1/``); the first native chunk is awaited
before answering so a full queue or a failed load is not a 200.  A failure
after that is an ``error`` event followed by ``response.failed``.  A client
that disconnects cancels the generation (see :mod:`localllm.server.streaming`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import RootModel

from localllm.api.schemas_infer import ChatRequest
from localllm.compat.responses_request import ResponsesConversion, responses_request_to_native
from localllm.compat.responses_stream import ResponsesStream, final_response, sse_event
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.inference.plan import Plan, chat_plan, fold
from localllm.inference.service import InferenceService
from localllm.server.deps import inference_service, offload, parse_json, validate
from localllm.server.jsonout import json_response
from localllm.server.streaming import ClientGone, first_of, gone_response, guarded, until_disconnect

log = logging.getLogger(__name__)
router = APIRouter()
Body = RootModel[Any]


async def _stream(request: Request, plan: Plan, conv: ResponsesConversion) -> Response:
    events = guarded(plan.events(plan.prepare()), request)
    try:
        first = await first_of(events)
    except ClientGone:
        return gone_response()
    shaper = ResponsesStream(plan.model, conv.echo)

    async def body() -> AsyncIterator[str]:
        try:
            for event in shaper.start():
                yield sse_event(event)
            native = first
            while native is not None:
                for event in shaper.feed(native):
                    yield sse_event(event)
                native = await first_of(events)
        except ClientGone:
            pass  # nobody to tell
        except Exception as exc:
            if not isinstance(exc, InvalidRequest):
                log.warning("responses stream failed: %s", exc)
            message = exc.message if isinstance(exc, LocalLLMError) else "internal error"
            for event in shaper.fail(message):
                yield sse_event(event)
        finally:
            await events.aclose()

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _build(svc: InferenceService, body: Any) -> tuple[Plan, ChatRequest, ResponsesConversion]:
    """Convert, validate and plan (a worker thread's work: see ``deps.offload``)."""
    conv = responses_request_to_native(body)
    req = validate(ChatRequest, conv.native)
    forced = req.tools and conv.tool_choice == "required"
    plan = chat_plan(svc, req, forced_tools=conv.native["tools"] if forced else None)
    return plan, req, conv


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    body = (await parse_json(request, Body)).root
    plan, req, conv = await offload(request, _build, inference_service(request), body)
    if conv.stream:
        return await _stream(request, plan, conv)
    try:
        folded = await until_disconnect(request, fold(plan.events(plan.prepare()), True))
    except ClientGone:
        return gone_response()
    return await json_response(request, final_response(folded, req.model, conv.echo))
