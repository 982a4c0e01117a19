"""``/api/generate``, ``/api/chat``, ``/api/embed``, ``/api/embeddings`` and ``/api/ps``.

Routes validate, call ``InferenceService`` and shape its events into Ollama's
response objects: streamed as NDJSON (``stream: true``, the default) or folded
into one JSON object.  A client that disconnects ends the stream, which releases
the scheduler slot and cancels the generation in the runner.
"""

from __future__ import annotations

import math
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
from localllm.engine.types import Done, Piece
from localllm.errors import InvalidRequest
from localllm.inference import InferenceService, Prepared, Target, now_rfc3339
from localllm.server.deps import parse_json
from localllm.server.output import OutputShaper, grammar_for, think_flag
from localllm.server.streaming import ndjson_response

router = APIRouter()


def inference(request: Request) -> InferenceService:
    service: InferenceService = request.app.state.inference
    return service


def _require_model(model: str) -> None:
    if not model:
        raise InvalidRequest("model is required")


def _check_top_logprobs(n: int) -> None:
    if not 0 <= n <= 20:
        raise InvalidRequest("top_logprobs must be between 0 and 20")


def final_metrics(done: Done, prep: Prepared) -> dict[str, Any]:
    return {
        "done_reason": "stop" if done.reason == "cancel" else done.reason,
        "total_duration": prep.total_ns,
        "load_duration": prep.load_ns,
        "prompt_eval_count": done.prompt_tokens,
        "prompt_eval_duration": done.prompt_eval_ns,
        "eval_count": done.eval_count,
        "eval_duration": done.eval_ns,
    }


async def _respond(events: AsyncIterator[dict[str, Any]], stream: bool,
                   fold: str) -> Response:
    if stream:
        return await ndjson_response(events)
    folded: dict[str, Any] = {}
    texts: dict[str, list[str]] = {"content": [], "thinking": []}
    calls: list[Any] = []
    logprobs: list[Any] = []
    async for event in events:
        body = event.get("message") if fold == "message" else event
        assert isinstance(body, dict)
        texts["content"].append(body.get("content" if fold == "message" else "response") or "")
        texts["thinking"].append(body.get("thinking") or "")
        calls.extend(body.get("tool_calls") or [])
        logprobs.extend(event.get("logprobs") or [])
        folded = event
    if fold == "message":
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts["content"])}
        if any(texts["thinking"]):
            message["thinking"] = "".join(texts["thinking"])
        if calls:
            message["tool_calls"] = calls
        folded["message"] = message
    else:
        folded["response"] = "".join(texts["content"])
        if any(texts["thinking"]):
            folded["thinking"] = "".join(texts["thinking"])
    if logprobs:
        folded["logprobs"] = logprobs
    return JSONResponse(folded)


def _load_reply(model: str, reason: str, chat: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "created_at": now_rfc3339()}
    if chat:
        body["message"] = {"role": "assistant", "content": ""}
    else:
        body["response"] = ""
    body.update({"done": True, "done_reason": reason})
    return body


async def _events(svc: InferenceService, prep: Prepared, shaper: OutputShaper,
                  model: str, chat: bool) -> AsyncIterator[dict[str, Any]]:
    def chunk(parts: dict[str, Any], done: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "created_at": now_rfc3339()}
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": parts.get("content", "")}
            for key in ("thinking", "tool_calls"):
                if parts.get(key):
                    message[key] = parts[key]
            body["message"] = message
        else:
            body["response"] = parts.get("content", "")
            if parts.get("thinking"):
                body["thinking"] = parts["thinking"]
        if parts.get("logprobs"):
            body["logprobs"] = parts["logprobs"]
        body["done"] = done
        return body

    async for event in svc.stream(prep):
        if isinstance(event, Piece):
            parts = shaper.feed(event)
            if parts:
                yield chunk(parts, False)
        elif isinstance(event, Done):
            parts = shaper.finish()
            body = chunk(parts, True)
            body.update(final_metrics(event, prep))
            if not chat and not prep.raw:
                # Ollama returns the conversation's tokens (legacy ``context``), except raw.
                body["context"] = event.context
            yield body


@router.post("/api/generate")
async def generate(request: Request) -> Response:
    req = await parse_json(request, GenerateRequest)
    _require_model(req.model)
    _check_top_logprobs(req.top_logprobs)
    svc = inference(request)
    target = svc.target(req.model)
    if req.raw and (req.template or req.system or req.context):
        raise InvalidRequest("raw mode does not support template, system, or context")
    if req.images:
        raise InvalidRequest(f'"{req.model}" does not support vision')
    if req.template:
        raise InvalidRequest(
            "per-request Go templates are not supported; the model's own chat template is used")
    if not req.prompt and not req.suffix:
        reason = await svc.load_only(target, req.options, req.keep_alive)
        return await _respond(_single(_load_reply(req.model, reason, False)), req.stream, "")
    think = think_flag(req.think, target)
    if req.raw:
        prompt: str | list[int] = req.prompt
    elif req.suffix:
        prompt = await _fill_in_middle(svc, target, req)
    else:
        messages: list[dict[str, Any]] = []
        system = req.system if req.system is not None else target.system
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": req.prompt})
        prompt = svc.render(target, messages, think=think)
    prep = svc.prepare(target, prompt, req.options, req.keep_alive, raw_prompt=req.raw,
                       grammar=grammar_for(req.format),
                       logprobs=req.top_logprobs or (1 if req.logprobs else 0),
                       truncate=req.truncate)
    if req.context and isinstance(prompt, str):
        tokens = await svc.tokenize(target, prompt, prep.load, prep.keep_alive)
        prep.completion.prompt = list(req.context) + tokens
    shaper = OutputShaper(target, think=think, tools=None, logprobs=req.logprobs,
                          prompt=prompt if isinstance(prompt, str) else "")
    return await _respond(_events(svc, prep, shaper, req.model, False), req.stream, "")


async def _fill_in_middle(svc: InferenceService, target: Target,
                          req: GenerateRequest) -> list[int]:
    kv = target.info.kv
    ids = [kv.get(f"tokenizer.ggml.fim_{part}_token_id") for part in ("pre", "suf", "mid")]
    if not all(isinstance(i, int) for i in ids):
        raise InvalidRequest(f'"{req.model}" does not support insert')
    resolved = svc.prepare(target, "", req.options, req.keep_alive)
    pre = await svc.tokenize(target, req.prompt, resolved.load, resolved.keep_alive)
    suf = await svc.tokenize(target, req.suffix or "", resolved.load, resolved.keep_alive)
    return [int(ids[0]), *pre, int(ids[1]), *suf, int(ids[2])]  # type: ignore[arg-type]


async def _single(body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield body


@router.post("/api/chat")
async def chat(request: Request) -> Response:
    req = await parse_json(request, ChatRequest)
    _require_model(req.model)
    _check_top_logprobs(req.top_logprobs)
    svc = inference(request)
    target = svc.target(req.model)
    if any(m.images for m in req.messages):
        raise InvalidRequest(f'"{req.model}" does not support vision')
    if not req.messages:
        reason = await svc.load_only(target, req.options, req.keep_alive)
        return await _respond(_single(_load_reply(req.model, reason, True)), req.stream,
                              "message")
    think = think_flag(req.think, target)
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    if target.system and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": target.system})
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    prompt = svc.render(target, messages, tools=tools, think=think)
    prep = svc.prepare(target, prompt, req.options, req.keep_alive,
                       grammar=grammar_for(req.format),
                       logprobs=req.top_logprobs or (1 if req.logprobs else 0),
                       truncate=req.truncate)
    shaper = OutputShaper(target, think=think, tools=tools, logprobs=req.logprobs,
                          prompt=prompt)
    return await _respond(_events(svc, prep, shaper, req.model, True), req.stream, "message")


def _normalise(vector: list[float], dimensions: int | None) -> list[float]:
    if dimensions:
        vector = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector


@router.post("/api/embed")
async def embed(request: Request) -> Response:
    req = await parse_json(request, EmbedRequest)
    _require_model(req.model)
    if req.dimensions is not None and req.dimensions <= 0:
        raise InvalidRequest("dimensions must be a positive integer")
    svc = inference(request)
    target = svc.target(req.model)
    inputs = [req.input] if isinstance(req.input, str) else list(req.input)
    start = now_ns()
    vectors, n_tokens, load_ns = await svc.embed(
        target, inputs, truncate=req.truncate, options=req.options, keep_alive=req.keep_alive)
    return JSONResponse({
        "model": req.model,
        "embeddings": [_normalise(v, req.dimensions) for v in vectors],
        "total_duration": now_ns() - start,
        "load_duration": load_ns,
        "prompt_eval_count": n_tokens,
    })


@router.post("/api/embeddings")
async def embeddings(request: Request) -> Response:
    req = await parse_json(request, EmbeddingsRequest)
    _require_model(req.model)
    svc = inference(request)
    target = svc.target(req.model)
    if not req.prompt:
        return JSONResponse({"embedding": []})
    vectors, _, _ = await svc.embed(target, [req.prompt], truncate=True,
                                    options=req.options, keep_alive=req.keep_alive)
    return JSONResponse({"embedding": vectors[0]})


@router.get("/api/ps")
async def ps(request: Request) -> Response:
    return JSONResponse({"models": inference(request).ps()})


def now_ns() -> int:
    import time

    return time.monotonic_ns()
