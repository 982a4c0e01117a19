"""What every foreign API's converter shares: SSE frames, object ids, field checks, failures.

The ``/v1`` streams are server-sent events: :func:`sse` writes one frame, with
an ``event:`` line when the API names its events (Anthropic, Responses) and
without one when it does not (Chat Completions).  Each API's stream class
(:class:`FrameStream`) turns the native chunks of a run into such frames
through one interface, ``start / feed / end / fail``, so the server's one SSE
pump (:func:`localllm.server.streaming.sse_response`) drives them all alike.

The field checks raise :class:`~localllm.errors.InvalidRequest` (a 400) naming
the field; each API words the name its own way (``where``).
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from localllm.errors import InvalidRequest, LocalLLMError

T_contra = TypeVar("T_contra", contravariant=True)


class FrameStream(Protocol[T_contra]):
    """One streamed answer in a foreign API's shape: every method returns SSE frames.

    ``start`` before the first item, ``feed`` for each item of the native
    stream, ``end`` after the last, and ``fail`` instead of the rest when the
    stream breaks after it began (the status is already sent: the failure
    becomes an event).
    """

    def start(self) -> list[str]: ...

    def feed(self, item: T_contra) -> list[str]: ...

    def end(self) -> list[str]: ...

    def fail(self, exc: BaseException) -> list[str]: ...


def sse(data: Any, event: str | None = None) -> str:
    """One server-sent event frame; ``event`` names it (an ``event:`` line)."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {body}\n\n"


def new_id(prefix: str) -> str:
    """A fresh object id: ``prefix`` (with its separator, e.g. ``msg_``) and 24 hex digits."""
    return f"{prefix}{secrets.token_hex(12)}"


def failure(exc: BaseException) -> tuple[int, str]:
    """(status, message) a client may be told about ``exc``: ours keep theirs; anything
    else is a 500 whose detail stays in the daemon's log."""
    if isinstance(exc, LocalLLMError):
        return exc.status, exc.message
    return 500, "internal error"


def number(
    body: Mapping[str, Any],
    key: str,
    *,
    integer: bool = False,
    low: float | None = None,
    where: str | None = None,
) -> Any:
    """``body[key]``, None when absent, else a finite number (``integer``: an int) >= ``low``.

    ``where`` is how the 400 names the field (default: ``key``).
    """
    value = body.get(key)
    if value is None:
        return None
    name = key if where is None else where
    kinds = int if integer else (int, float)
    # Only a float can be inf or nan (a huge int is finite, and too large for isfinite).
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise InvalidRequest(f"{name} must be {'an integer' if integer else 'a number'}")
    if low is not None and value < low:
        raise InvalidRequest(f"{name} must be >= {low}")
    return value


def content_parts(content: Any) -> list[tuple[str | None, Any]]:
    """A message's content array as (type, part) pairs, the type None for a part that is
    no object; a 400 when it is no array (a string content is the caller's: its text)."""
    if not isinstance(content, list):
        raise InvalidRequest("message content must be a string or an array of content parts")
    return [(part.get("type") if isinstance(part, Mapping) else None, part) for part in content]


def string_field(value: Any, where: str) -> str:
    """``value``, which must be a string (``where`` names it in the 400)."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{where} must be a string")
    return value
