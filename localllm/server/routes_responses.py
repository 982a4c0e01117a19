"""The OpenAI Responses API route: ``POST /v1/responses``.

A thin converter onto the chat path, like ``/v1/chat/completions``:
:mod:`localllm.compat.responses.request` turns the body into an ``/api/chat``
request, :func:`localllm.server.foreign.chat` plans it (templates, tool
and reasoning parsers, the scheduler), and
:mod:`localllm.compat.responses.stream` shapes the chunks into the
``response`` object or its event stream.  One generation per request (the
Responses API has no ``n``).  The daemon is stateless: nothing is stored and
``previous_response_id`` is refused (see docs/api.md).

Errors before the stream starts keep their HTTP status in OpenAI's shape (the
app's handlers do that under ``/v1/``); the first native chunk is awaited
before answering so a full queue or a failed load is not a 200.  A failure
after that is an ``error`` event followed by ``response.failed``.  A client
that disconnects cancels the generation (see :mod:`localllm.server.disconnect`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localllm.compat.responses.request import responses_request_to_native
from localllm.compat.responses.stream import ResponsesStream, final_response
from localllm.server import foreign
from localllm.server.jsonout import json_result
from localllm.server.streaming import sse_response

router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    plan, conv = await foreign.plan_request(request, responses_request_to_native, foreign.chat)
    if conv.stream:
        return await sse_response(request, plan.run(), ResponsesStream(plan.model, conv.echo))
    return await json_result(
        request, plan.result(), lambda folded: final_response(folded, plan.model, conv.echo)
    )
