"""The error body a refused request gets, in the shape the clients of its path read.

Owned here: which shape a path takes (Anthropic's under ``/v1/messages``,
OpenAI's under the rest of ``/v1/``, Ollama's ``{"error": "..."}`` elsewhere),
for the app's exception handlers, and how the two ASGI layers that answer before
any route (the security guard, the request middleware) send one.  The shapes
themselves are built in ``compat`` (``compat/openai/errors.py``, ``compat/anthropic/errors.py``).
"""

from __future__ import annotations

import json

from starlette.types import Send

from localllm.api.wire import StreamError
from localllm.compat.anthropic.errors import anthropic_error, is_anthropic_path
from localllm.compat.anthropic.types import ErrorBody as AnthropicError
from localllm.compat.openai.errors import error_body, is_openai_path
from localllm.compat.openai.types import ErrorBody as OpenAIError

ErrorDoc = AnthropicError | OpenAIError | StreamError


def error_doc(
    path: str, status: int, message: str, *, code: str | None = None
) -> tuple[int, ErrorDoc]:
    """(status, body) for an error on ``path``; Anthropic's paths say 529 for our 503,
    and ``code`` is OpenAI's ``error.code``."""
    if is_anthropic_path(path):
        return anthropic_error(status, message)
    if is_openai_path(path):
        return status, error_body(status, message, code=code)
    return status, {"error": message}


async def send_error(
    send: Send, status: int, doc: ErrorDoc, headers: list[tuple[bytes, bytes]]
) -> None:
    """``doc`` as a whole JSON response on a raw ASGI ``send``, with ``headers`` added."""
    body = json.dumps(doc).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + headers})
    await send({"type": "http.response.body", "body": body})
