"""Decision routes: ``POST /v1/systemone`` (System One's path) and ``POST /api/eval`` (Ollama's).

Both take the System One body and answer ``{model, answers, usage}``
(compat/systemone.py); ``/api/eval`` adds Ollama's ``total_duration``,
``load_duration`` and ``prompt_eval_count``, as ``/api/rerank`` does.  Errors come
in the path's shape: OpenAI's under ``/v1/``, Ollama's ``{"error"}`` on
``/api/eval`` (server/errorbody.py).

Parse and check (compat) -> the model looked up and the prompts rendered
(inference/scoring.py), in a worker thread -> the options scored in the model's
runner -> the answers.  A client that leaves cancels the rest.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localllm.compat.systemone import (
    SystemOneBody,
    SystemOneCall,
    SystemOneResponse,
    response,
    systemone_call,
    turns,
)
from localllm.inference.scoring import Decided, ScorePlan, decide, score_plan
from localllm.inference.service import InferenceService
from localllm.server.deps import inference_service, offload, parse_json
from localllm.server.disconnect import ClientGone, gone_response, until_disconnect
from localllm.server.jsonout import json_response

router = APIRouter()


class EvalResponse(SystemOneResponse):
    total_duration: int
    load_duration: int
    prompt_eval_count: int


def _plan(svc: InferenceService, call: SystemOneCall) -> ScorePlan:
    labels = [q.labels for q in call.questions]
    return score_plan(svc, call.model, turns(call), labels, call.options, call.keep_alive)


async def _answered(request: Request) -> tuple[SystemOneResponse, Decided]:
    """The request parsed, planned and scored, and its answer (the work that takes
    CPU, the store lookup, the rendering and the answers' arithmetic, in worker threads)."""
    body = await parse_json(request, SystemOneBody)
    call = systemone_call(body, len(getattr(request.state, "raw_body", b"")))
    svc = inference_service(request)
    plan = await offload(request, _plan, svc, call)
    decided = await until_disconnect(request, decide(svc, plan))
    answer = await offload(request, response, call, decided.logprobs, decided.n_tokens)
    return answer, decided


@router.post("/v1/systemone")
async def systemone(request: Request) -> Response:
    try:
        answer, _ = await _answered(request)
    except ClientGone:
        return gone_response()
    return await json_response(request, answer)


@router.post("/api/eval")
async def api_eval(request: Request) -> Response:
    start = time.monotonic_ns()
    try:
        answer, decided = await _answered(request)
    except ClientGone:
        return gone_response()
    out: EvalResponse = {
        **answer,
        "total_duration": time.monotonic_ns() - start,
        "load_duration": decided.load_ns,
        "prompt_eval_count": decided.n_tokens,
    }
    return await json_response(request, out)
