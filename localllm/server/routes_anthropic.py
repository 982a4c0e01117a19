"""Anthropic-compatible routes: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Thin converters, as :mod:`localllm.server.routes_openai` is:
:mod:`localllm.compat.anthropic.request` turns the body into an ``/api/chat``
request, :func:`localllm.server.foreign.chat` plans it exactly as
``/api/chat`` would (template, tool-call and thinking parsers, scheduler), and
:mod:`localllm.compat.anthropic.response` / :mod:`localllm.compat.anthropic.stream`
shape the chunks back.  Streams are Anthropic's server-sent events; the first
native chunk is awaited before the response starts, so a full queue or a
failed load keeps its HTTP status, and a failure after it is an ``error``
event.  Errors before that are Anthropic's shape (the app's handlers do that
for every path under ``/v1/messages``).  A client that disconnects, streaming
or not, cancels the generation (see :mod:`localllm.server.disconnect`).
``anthropic-version`` and ``anthropic-beta`` headers and the ``?beta=true`` query
Claude Code adds are ignored: what a beta changes is read from the body's own
fields.  Fields and tools the daemon drops are logged once per client
(:mod:`localllm.server.requestlog`).
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localllm.api.wire import ChatChunk
from localllm.compat.anthropic.request import MessagesConversion, messages_request_to_native
from localllm.compat.anthropic.response import message_object
from localllm.compat.anthropic.stream import MessageStream
from localllm.inference.generation import Generation
from localllm.server import foreign
from localllm.server.jsonout import json_result
from localllm.server.streaming import sse_response

router = APIRouter()
# Anthropic's stop_sequence needs the stop string; a conversion that leaves no
# message (a user turn of no blocks) goes to the planner as it always did.
_build = partial(foreign.chat, report_stop=True, load_if_empty=True)


async def _plan(
    request: Request, *, count_only: bool = False
) -> tuple[Generation[ChatChunk], MessagesConversion]:
    convert = partial(messages_request_to_native, count_only=count_only)
    return await foreign.plan_request(request, convert, _build)


@router.post("/v1/messages")
async def messages(request: Request) -> Response:
    plan, conv = await _plan(request)
    omit = conv.omit_thinking
    if conv.stream:
        stream = MessageStream(plan.model, omit_thinking=omit)
        return await sse_response(request, plan.run(), stream)
    return await json_result(
        request,
        plan.result(),
        lambda native: message_object(native, model=plan.model, omit_thinking=omit),
    )


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """The prompt's token count as the model's tokenizer sees it (loads the model)."""
    plan, _ = await _plan(request, count_only=True)
    return await json_result(request, plan.count_tokens(), lambda tokens: {"input_tokens": tokens})
