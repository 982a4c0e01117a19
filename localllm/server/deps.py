"""Request plumbing shared by route modules: JSON bodies and the app's services.

Bodies are parsed here rather than by FastAPI's body parameters because
Ollama's clients (``curl -d``) often send JSON labelled as form data, and
Ollama parses the body as JSON whatever the ``Content-Type``.  Every failure
becomes ``InvalidRequest`` (400) with a message a person can act on.

Size is capped once, by ``RequestMiddleware`` (``LOCALLLM_MAX_BODY``, 413);
the encoding (strict UTF-8), depth and the number of values by ``jsonparse``,
which never runs one C call over more than a slice of the body.  A body over
``INLINE`` bytes is parsed and validated in a worker thread, so the event loop
keeps serving while a large request is read.  Routes hand the rest of their CPU
work (converting a foreign API's body, resolving the model in the store,
rendering the template, building the grammar) to ``offload``: the same threads,
at most ``CPU_THREADS`` at once.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from localllm.errors import InvalidRequest
from localllm.inference.service import InferenceService
from localllm.models.service import ModelService
from localllm.server import jsonparse
from localllm.server.jsonparse import MAX_DEPTH as MAX_JSON_DEPTH, json_depth

__all__ = ["MAX_JSON_DEPTH", "json_depth"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
# Up to here a parse and its validation take under ~3 ms whatever the shape: not worth a
# thread hop.
INLINE = 64 << 10
# Worker threads take turns with the event loop for the interpreter lock (5 ms each, the
# switch interval): two keep the loop's turn frequent, and bound the memory of bodies
# being parsed.  More would not run Python any faster.
CPU_THREADS = 2


def app_limiter(request: Request, name: str, size: int) -> anyio.CapacityLimiter:
    """The app's limiter ``name`` for work in threads, made on first use: inside the
    app's event loop, which anyio's limiters belong to."""
    state = request.app.state
    limiter: anyio.CapacityLimiter | None = getattr(state, name, None)
    if limiter is None:
        limiter = anyio.CapacityLimiter(size)
        setattr(state, name, limiter)
    return limiter


async def offload(request: Request, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in one of the app's worker threads, off the event loop."""
    limiter = app_limiter(request, "cpu_threads", CPU_THREADS)
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=limiter)


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
    request.state.raw_body = raw  # for a refusal's record (server/requestlog.py)
    if len(raw) <= INLINE:
        return decode(raw, model)
    return await offload(request, decode, raw, model)


def decode(raw: bytes, model: type[M]) -> M:
    """``raw`` parsed (within ``jsonparse``'s limits) and validated as ``model``."""
    if not raw or raw.isspace():
        raise InvalidRequest("missing request body")
    data = jsonparse.loads(raw)
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
