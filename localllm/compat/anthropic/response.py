"""Native (Ollama-shaped) chat results -> Anthropic's ``message`` object and its parts.

A finished ``/api/chat`` result becomes one ``message`` (:func:`message_object`);
the streamed twin is :mod:`localllm.compat.anthropic.stream`, which builds its
blocks from the same parts.  Blocks come in the order the model wrote them:
thinking, text, then each tool call as one ``tool_use`` block.

``stop_reason``: ``tool_use`` when the reply calls a tool, ``max_tokens`` when
``max_tokens`` (or the context) ran out, else ``end_turn``.  ``stop_sequence``
is reported only when the native result names the stop string that ended it;
today's engine reports a stop string and the end-of-generation token alike as
``"stop"``, so those replies say ``end_turn``.
"""

from __future__ import annotations

import json

from localllm.api.wire import ChatChunk, Metrics, ToolCall
from localllm.compat.anthropic.types import Block, MessageObject, ToolUseBlock, Usage
from localllm.compat.frames import new_id


def usage(native: Metrics) -> Usage:
    """Anthropic counts what the cache served apart: ``input_tokens`` is the rest of the
    prompt.  Every prompt is cached without being asked to, so none is a cache write."""
    prompt = int(native.get("prompt_eval_count") or 0)
    cached = min(prompt, int(native.get("prompt_cached_count") or 0))
    return {
        "input_tokens": prompt - cached,
        "output_tokens": int(native.get("eval_count") or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def stop_reason(native: ChatChunk, called_tools: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a finished native result."""
    if called_tools:
        return "tool_use", None
    if native.get("done_reason") == "length":
        return "max_tokens", None
    matched = native.get("stop_sequence")  # see the module docstring
    if isinstance(matched, str) and matched:
        return "stop_sequence", matched
    return "end_turn", None


def tool_use_block(call: ToolCall) -> ToolUseBlock:
    fn = call.get("function") or {}
    args: object = fn.get("arguments")
    if isinstance(args, str):  # a parser that kept the model's text: give back its object
        try:
            args = json.loads(args)
        except ValueError:
            args = {}
    return {
        "type": "tool_use",
        "id": call.get("id") or new_id("toolu_"),
        "name": fn.get("name", ""),
        "input": args if isinstance(args, dict) else {},
    }


def message_object(
    native: ChatChunk, *, model: str, id: str | None = None, omit_thinking: bool = False
) -> MessageObject:
    """A final ``/api/chat`` result -> an Anthropic ``message`` (``omit_thinking``: its
    thinking block with empty text, as ``thinking.display: "omitted"`` asks)."""
    msg = native.get("message") or {}
    content: list[Block] = []
    if msg.get("thinking"):
        text = "" if omit_thinking else msg["thinking"]
        content.append({"type": "thinking", "thinking": text, "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    calls = msg.get("tool_calls") or []
    content += [tool_use_block(c) for c in calls]
    reason, sequence = stop_reason(native, bool(calls))
    return {
        "id": id or new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(native),
    }
