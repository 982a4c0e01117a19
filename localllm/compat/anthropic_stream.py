"""Native (Ollama-shaped) chat responses -> Anthropic Messages objects, events and errors.

A finished ``/api/chat`` result becomes one ``message`` object
(:func:`message_object`); a stream goes through :class:`MessageStream`, fed
the native chunks in order, which yields Anthropic's event sequence:
``message_start`` and a ``ping``, then per content block
``content_block_start`` / ``content_block_delta`` (``thinking_delta``,
``text_delta``, ``input_json_delta``) / ``content_block_stop``, and at the end
``message_delta`` (stop reason, usage) and ``message_stop``.  A failure after
the first event is an ``error`` event.  Blocks come in the order the model
wrote them: thinking, text, then each tool call as one ``tool_use`` block
whose whole input arrives in one ``input_json_delta`` (our parser emits a call
only once it is complete).

``stop_reason``: ``tool_use`` when the reply calls a tool, ``max_tokens`` when
``max_tokens`` (or the context) ran out, else ``end_turn``.  ``stop_sequence``
is reported only when the native result names the stop string that ended it;
today's engine reports a stop string and the end-of-generation token alike as
``"stop"``, so those replies say ``end_turn``.

Errors: :func:`anthropic_error` is Anthropic's ``{"type": "error", "error":
{"type", "message"}}`` with its status names; the app's handlers, the
security layer and the request middleware use it for every path under
``/v1/messages`` (:func:`is_anthropic_path`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

PREFIX = "/v1/messages"
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 529: "overloaded_error"}
# Anthropic says "overloaded" with 529; its SDKs and Claude Code retry on it.
_OVERLOADED = 529

Event = tuple[str, dict[str, Any]]  # (SSE event name, data)


def is_anthropic_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def anthropic_error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) in Anthropic's shape; our 503 (busy, draining) becomes 529."""
    if status == 503:
        status = _OVERLOADED
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def sse_event(name: str, data: Mapping[str, Any]) -> str:
    """One server-sent event frame with Anthropic's ``event:`` line."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {body}\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def usage(native: Mapping[str, Any]) -> dict[str, int]:
    return {"input_tokens": int(native.get("prompt_eval_count") or 0),
            "output_tokens": int(native.get("eval_count") or 0)}


def stop_reason(native: Mapping[str, Any], called_tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished native result."""
    if called_tools:
        return "tool_use", None
    if native.get("done_reason") == "length":
        return "max_tokens", None
    matched = native.get("stop_sequence")  # see the module docstring
    if isinstance(matched, str) and matched:
        return "stop_sequence", matched
    return "end_turn", None


def tool_use_block(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):  # a parser that kept the model's text: give back its object
        try:
            args = json.loads(args)
        except ValueError:
            args = {}
    return {"type": "tool_use", "id": call.get("id") or new_id("toolu_"),
            "name": fn.get("name", ""), "input": args if isinstance(args, dict) else {}}


def message_object(native: Mapping[str, Any], *, model: str,
                   id: str | None = None) -> dict[str, Any]:
    """A final ``/api/chat`` result -> an Anthropic ``message``."""
    msg = native.get("message") or {}
    content: list[dict[str, Any]] = []
    if msg.get("thinking"):
        content.append({"type": "thinking", "thinking": msg["thinking"], "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    calls = msg.get("tool_calls") or []
    content += [tool_use_block(c) for c in calls]
    reason, sequence = stop_reason(native, bool(calls))
    return {"id": id or new_id("msg_"), "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": reason,
            "stop_sequence": sequence, "usage": usage(native)}


class MessageStream:
    """Turns the ``/api/chat`` stream of one reply into Anthropic's events."""

    def __init__(self, model: str, *, id: str | None = None) -> None:
        self.model = model
        self.id = id or new_id("msg_")
        self._index = -1  # index of the last block started
        self._open: str | None = None  # "thinking" or "text" while such a block is open
        self._called_tools = False

    def start(self) -> list[Event]:
        # The prompt's size is known only once the runner has read it: the real
        # count comes with message_delta.
        message: dict[str, Any] = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}
        return [("message_start", {"type": "message_start", "message": message}),
                ("ping", {"type": "ping"})]

    def feed(self, native: Mapping[str, Any]) -> list[Event]:
        """Events for one native chunk (a mid-stream ``error`` becomes an error event)."""
        if "error" in native:
            return [error_event(500, str(native["error"]))]
        msg = native.get("message") or {}
        out: list[Event] = []
        if msg.get("thinking"):
            out += self._delta("thinking", {"type": "thinking_delta",
                                            "thinking": msg["thinking"]})
        if msg.get("content"):
            out += self._delta("text", {"type": "text_delta", "text": msg["content"]})
        for call in msg.get("tool_calls") or []:
            block = tool_use_block(call)
            partial = json.dumps(block["input"], ensure_ascii=False)
            out += self._close()
            out += self._begin({**block, "input": {}})
            out.append(("content_block_delta", {
                "type": "content_block_delta", "index": self._index,
                "delta": {"type": "input_json_delta", "partial_json": partial}}))
            out += self._close(force=True)
            self._called_tools = True
        if native.get("done"):
            out += self._close()
            reason, sequence = stop_reason(native, self._called_tools)
            out.append(("message_delta", {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": usage(native)}))
            out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if self._open != kind:
            out += self._close()
            start = ({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                     else {"type": "text", "text": ""})
            out += self._begin(start)
            self._open = kind
        out.append(("content_block_delta", {"type": "content_block_delta",
                                            "index": self._index, "delta": delta}))
        return out

    def _begin(self, block: dict[str, Any]) -> list[Event]:
        self._index += 1
        return [("content_block_start", {"type": "content_block_start", "index": self._index,
                                         "content_block": block})]

    def _close(self, *, force: bool = False) -> list[Event]:
        if self._open is None and not force:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]


def error_event(status: int, message: str) -> Event:
    return ("error", anthropic_error(status, message)[1])
