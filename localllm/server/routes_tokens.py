"""Token routes: tokenize, detokenize, apply a chat template, count a request's input tokens.

- ``POST /api/tokenize`` ``{model, text}`` -> ``{model, tokens}`` and ``POST
  /api/detokenize`` ``{model, tokens}`` -> ``{model, text}``: Ollama has no such
  routes; these are the shape its JavaScript client once shipped (``tokenize``,
  ``detokenize``), in Ollama's style (``keep_alive``, ``options``, ``{"error"}``).
- ``POST /tokenize``, ``/detokenize``, ``/apply-template``: llama-server's, at its
  paths, with a ``model`` field as its router mode takes (clients written for
  llama-server count with them): ``{content, add_special,
  parse_special}`` -> ``{tokens}``; ``{tokens}`` -> ``{content}``; a Chat
  Completions body -> ``{prompt}``, the prompt the model would be given, rendered
  by the same template code as a generation (nothing loads).
- ``POST /v1/responses/input_tokens`` (OpenAI's; the SDK's
  ``client.responses.input_tokens.count``) and ``POST
  /v1/chat/completions/input_tokens`` (llama-server's: OpenAI has none for Chat
  Completions): the body a generation would take -> ``{"object":
  "response.input_tokens", "input_tokens": n}``, the same count as that
  generation's ``usage`` (the template, BOS and all), as
  ``/v1/messages/count_tokens`` does for Anthropic's.

Parse -> convert (``compat``) -> plan (``inference``) in a worker thread, then the
tokenizer in the model's runner (``inference/tokens.py``); bad input is a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar, cast

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, JsonValue, StrictInt

from localllm.api.wire import (
    ApplyTemplateResponse,
    DetokenizeResponse,
    InputTokensResponse,
    ServerDetokenizeResponse,
    ServerTokenizeResponse,
    TokenizeResponse,
)
from localllm.compat.openai.request import chat_request_to_native
from localllm.errors import InvalidRequest
from localllm.inference.service import Target
from localllm.inference.tokens import detokenize, text_target, tokenize
from localllm.server import foreign
from localllm.server.deps import inference_service, offload, parse_json
from localllm.server.jsonout import json_response, json_result
from localllm.server.stored import converter, responses_db

router = APIRouter()
# The prompt a generation would be given, for a model that chats.
_prompt = partial(foreign.chat, chats=True)


class TokenizeRequest(BaseModel):
    model: str = ""
    text: str | None = None
    keep_alive: str | float | None = None
    options: dict[str, JsonValue] | None = None


class DetokenizeRequest(BaseModel):
    model: str = ""
    tokens: list[StrictInt] | None = None
    keep_alive: str | float | None = None
    options: dict[str, JsonValue] | None = None


class ServerTokenizeRequest(BaseModel):
    model: str = ""
    content: str | None = None
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class ServerDetokenizeRequest(BaseModel):
    model: str = ""
    tokens: list[StrictInt] | None = None


R = TypeVar("R", TokenizeRequest, DetokenizeRequest, ServerTokenizeRequest, ServerDetokenizeRequest)
V = TypeVar("V")


async def _read(
    request: Request,
    kind: type[R],
    name: str,
    field: Callable[[R], V | None],
    check: Callable[[R], None] | None = None,
) -> tuple[R, V, Target]:
    """The body as ``kind``, its required field ``name`` (``field`` reads it), checked
    further by ``check``, and the target of its model (a text model)."""
    req = await parse_json(request, kind)
    value = field(req)
    if value is None:
        raise InvalidRequest(f"{name} is required")
    if check is not None:
        check(req)
    target = await offload(request, text_target, inference_service(request), req.model)
    return req, value, target


def _no_pieces(req: ServerTokenizeRequest) -> None:
    if req.with_pieces:
        raise InvalidRequest(
            "with_pieces is not supported: /detokenize a token at a time for its text"
        )


@router.post("/api/tokenize")
async def api_tokenize(request: Request) -> Response:
    req, text, target = await _read(request, TokenizeRequest, "text", lambda r: r.text)
    tokens = await tokenize(
        inference_service(request), target, text, options=req.options, keep_alive=req.keep_alive
    )
    body: TokenizeResponse = {"model": req.model, "tokens": tokens}
    return await json_response(request, body)


@router.post("/api/detokenize")
async def api_detokenize(request: Request) -> Response:
    req, tokens, target = await _read(request, DetokenizeRequest, "tokens", lambda r: r.tokens)
    text = await detokenize(
        inference_service(request), target, tokens, options=req.options, keep_alive=req.keep_alive
    )
    body: DetokenizeResponse = {"model": req.model, "text": text}
    return await json_response(request, body)


@router.post("/tokenize")
async def server_tokenize(request: Request) -> Response:
    req, content, target = await _read(
        request, ServerTokenizeRequest, "content", lambda r: r.content, _no_pieces
    )
    tokens = await tokenize(
        inference_service(request),
        target,
        content,
        add_special=req.add_special,
        parse_special=req.parse_special,
    )
    body: ServerTokenizeResponse = {"tokens": tokens}
    return await json_response(request, body)


@router.post("/detokenize")
async def server_detokenize(request: Request) -> Response:
    _, tokens, target = await _read(request, ServerDetokenizeRequest, "tokens", lambda r: r.tokens)
    body: ServerDetokenizeResponse = {
        "content": await detokenize(inference_service(request), target, tokens)
    }
    return await json_response(request, body)


def _counted(tokens: int) -> InputTokensResponse:
    return {"object": "response.input_tokens", "input_tokens": tokens}


@router.post("/v1/responses/input_tokens")
async def responses_input_tokens(request: Request) -> Response:
    # The history a previous_response_id or conversation names counts too, as OpenAI's does.
    convert = converter(responses_db(request), storing=False)
    plan, _ = await foreign.plan_request(request, convert, _prompt)
    return await json_result(request, plan.count_tokens(), _counted)


@router.post("/v1/chat/completions/input_tokens")
async def chat_input_tokens(request: Request) -> Response:
    plan, _ = await foreign.plan_request(request, chat_request_to_native, _prompt)
    return await json_result(request, plan.count_tokens(), _counted)


@router.post("/apply-template")
async def apply_template(request: Request) -> Response:
    plan, _ = await foreign.plan_request(request, chat_request_to_native, _prompt)
    rendered: ApplyTemplateResponse = {"prompt": cast(str, plan.prompt)}
    return await json_response(request, rendered)
