"""Request plumbing shared by route modules: JSON bodies and the app's services.

Bodies are parsed here rather than by FastAPI's body parameters because
Ollama's clients (``curl -d``) often send JSON labelled as form data, and
Ollama parses the body as JSON whatever the ``Content-Type``.  Every failure
becomes ``InvalidRequest`` (400) with a message a person can act on.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from localllm.errors import InvalidRequest
from localllm.inference.service import InferenceService
from localllm.services import ModelService

M = TypeVar("M", bound=BaseModel)
MAX_JSON_BODY = 64 << 20  # chat requests may carry base64 images


def describe_validation(exc: ValidationError) -> str:
    """One line for the first problem, e.g. ``invalid value for "stream": ...``."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    if not loc:
        return "invalid request body: expected a JSON object"
    return f'invalid value for "{".".join(loc)}": {err.get("msg", "invalid")}'


async def parse_json(request: Request, model: type[M]) -> M:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_JSON_BODY:
            raise InvalidRequest("request body too large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise InvalidRequest("missing request body")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"invalid JSON in request body: {exc}") from None
    if data is None:
        raise InvalidRequest("missing request body")
    return validate(model, data)


def validate(model: type[M], data: Any) -> M:
    """``data`` as ``model``; a validation failure is a 400 naming the first problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(describe_validation(exc)) from None


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A FastAPI dependency parsing the body as ``model``: ``Depends(json_body(X))``."""

    async def dependency(request: Request) -> M:
        return await parse_json(request, model)

    return dependency


def model_service(request: Request) -> ModelService:
    service: ModelService = request.app.state.models
    return service


def inference_service(request: Request) -> InferenceService:
    service: InferenceService = request.app.state.inference
    return service
