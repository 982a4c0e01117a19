"""OpenAI's error shape, built here only: ``{"error": {"message", "type", "param", "code"}}``.

Every path under ``/v1/`` (Anthropic's excepted) answers errors this way: the
app's exception handlers, the request middleware's refusals, the security
layer's 401, and a failure in the middle of a stream (sent as one more event).
The ``type`` follows from the HTTP status alone (:func:`error_type`), so the
same status always reads the same to a client, whichever layer refused.
"""

from __future__ import annotations

from localllm.compat.frames import failure
from localllm.compat.openai.types import ErrorBody

PREFIX = "/v1/"
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
}


def is_openai_path(path: str) -> bool:
    """Whether errors on ``path`` take OpenAI's shape (Anthropic's paths are checked first)."""
    return path.startswith(PREFIX)


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str, *, code: str | None = None) -> ErrorBody:
    return {"error": {"message": message, "type": error_type(status), "param": None, "code": code}}


def error_from_exception(exc: BaseException) -> tuple[int, ErrorBody]:
    """(HTTP status, OpenAI error body) for any exception; ours keep their status."""
    status, message = failure(exc)
    return status, error_body(status, message)
