"""Request plumbing shared by route modules: JSON bodies and the app's services.

Bodies are parsed here rather than by FastAPI's body parameters because
Ollama's clients (``curl -d``) often send JSON labelled as form data, and
Ollama parses the body as JSON whatever the ``Content-Type``.  Every failure
becomes ``InvalidRequest`` (400) with a message a person can act on.

Size is capped once, by ``RequestMiddleware`` (``LOCALLLM_MAX_BODY``, 413).
Nesting is capped here at ``MAX_JSON_DEPTH`` levels of ``[``/``{`` *before*
parsing: ``json.loads`` and everything after it (validation, JSON-schema to
grammar) recurse per level, and a body nested 100,000 deep would otherwise
end in ``RecursionError`` — a 500 — instead of a plain 400.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from localllm.errors import InvalidRequest
from localllm.inference.service import InferenceService
from localllm.services import ModelService

M = TypeVar("M", bound=BaseModel)
# Real requests (chat messages, tool schemas, ``format`` schemas) stay far below this;
# it leaves the recursive consumers of a parsed body well inside Python's stack.
MAX_JSON_DEPTH = 100
# A JSON string, escapes included (the "unrolled loop" form: no backtracking blow-up).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def describe_validation(exc: ValidationError) -> str:
    """One line for the first problem, e.g. ``invalid value for "stream": ...``."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    if not loc:
        return "invalid request body: expected a JSON object"
    return f'invalid value for "{".".join(loc)}": {err.get("msg", "invalid")}'


async def parse_json(request: Request, model: type[M]) -> M:
    # The size cap is the middleware's (LOCALLLM_MAX_BODY): one limit, one status.
    chunks: list[bytes] = []
    async for chunk in request.stream():
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise InvalidRequest("missing request body")
    check_depth(raw)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"invalid JSON in request body: {exc}") from None
    if data is None:
        raise InvalidRequest("missing request body")
    return validate(model, data)


def json_depth(raw: bytes, stop_after: int = MAX_JSON_DEPTH) -> int:
    """Deepest ``[``/``{`` nesting in ``raw``, brackets inside strings not counted.

    Cheap: strings are blanked and non-brackets dropped by C code; only the
    brackets are walked, and the walk stops once ``stop_after`` is passed.
    """
    if raw.count(b"[") + raw.count(b"{") <= stop_after:
        return 0  # cannot be deeper than the limit: skip the scan
    brackets = _JSON_STRING.sub(b'""', raw).translate(None, _NOT_BRACKET)
    depth = deepest = 0
    for c in brackets:
        if c in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_after:
                    break
        else:
            depth -= 1
    return deepest


def check_depth(raw: bytes) -> None:
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise InvalidRequest(
            f"invalid JSON in request body: nested deeper than {MAX_JSON_DEPTH} levels")


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
