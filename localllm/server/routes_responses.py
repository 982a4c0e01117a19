"""The OpenAI Responses API route: ``POST /v1/responses``.

A thin converter onto the chat path, like ``/v1/chat/completions``:
:mod:`localllm.compat.responses.request` turns the body into an ``/api/chat``
request, :func:`localllm.server.foreign.chat` plans it (templates, tool
and reasoning parsers, the scheduler), and
:mod:`localllm.compat.responses.stream` shapes the chunks into the
``response`` object or its event stream.  One generation per request (the
Responses API has no ``n``).  A response is stored once it is finished (unless
``store`` is false), and ``previous_response_id`` or ``conversation`` names the
stored history it continues: :mod:`localllm.server.stored` finds and keeps
them; reading and deleting them is :mod:`localllm.server.routes_stored`'s.

Errors before the stream starts keep their HTTP status in OpenAI's shape (the
app's handlers do that under ``/v1/``); the first native chunk is awaited
before answering so a full queue or a failed load is not a 200.  A failure
after that is an ``error`` event followed by ``response.failed``.  A client
that disconnects cancels the generation (see :mod:`localllm.server.disconnect`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localllm.compat.responses.stream import ResponsesStream, final_response
from localllm.server import foreign, responses_mcp
from localllm.server.deps import offload
from localllm.server.disconnect import ClientGone, gone_response, until_disconnect
from localllm.server.jsonout import json_response
from localllm.server.stored import KeptStream, converter, record, responses_db
from localllm.server.streaming import sse_response

router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    if await responses_mcp.wants_mcp(request):  # the daemon runs the MCP calls itself
        return await responses_mcp.create(request)
    db = responses_db(request)
    plan, conv = await foreign.plan_request(request, converter(db), foreign.chat)
    if conv.stream:
        shaper = ResponsesStream(plan.model, conv.echo)

        async def keep() -> None:
            if shaper.finished:
                await offload(request, record, db, conv, shaper.response)

        kept = KeptStream(shaper, keep)
        return await sse_response(request, kept.items(plan.run()), kept)
    try:
        folded = await until_disconnect(request, plan.result())
    except ClientGone:
        return gone_response()
    response = final_response(folded, plan.model, conv.echo)
    await offload(request, record, db, conv, response)
    return await json_response(request, response)
