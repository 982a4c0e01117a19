"""Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``.

Its error types are named after the HTTP status.  The app's handlers, the
security layer and the request middleware answer every path under
``/v1/messages`` (:func:`is_anthropic_path`) this way, and a failure in the
middle of a stream is an ``error`` event with the same body.
"""

from __future__ import annotations

import re

from localllm.compat.anthropic.types import ErrorBody

PREFIX = "/v1/messages"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# Anthropic says "overloaded" with 529; its SDKs and Claude Code retry on it.
_OVERLOADED = 529
# The engine's overflow message (engine/slots.py) and Anthropic's own wording for it,
# which Claude Code parses to compact the conversation by the difference and retry.
_OVERFLOW = re.compile(r"exceeds the context length \((\d+) tokens > (\d+) maximum\)")


def is_anthropic_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def anthropic_error(status: int, message: str) -> tuple[int, ErrorBody]:
    """(HTTP status, body) in Anthropic's shape; our 503 (busy, draining) becomes 529."""
    if status == 503:
        status = _OVERLOADED
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    overflow = _OVERFLOW.search(message) if status == 400 else None
    if overflow:
        message = f"prompt is too long: {overflow[1]} tokens > {overflow[2]} maximum"
    return status, {"type": "error", "error": {"type": kind, "message": message}}
