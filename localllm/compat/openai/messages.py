"""OpenAI chat messages -> native (Ollama-shaped) ``/api/chat`` messages.

Pure converter, used by :mod:`localllm.compat.openai.request` for
``/v1/chat/completions``.  ``developer`` is ``system``; ``image_url`` parts leave
``[img]`` where they stood and their URL in the native ``images`` field;
an assistant's ``reasoning`` is the native ``thinking``; ``tool_calls``
arguments (JSON strings) become objects; a ``tool`` message is named after the
call it answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from localllm.api.bodies import ChatMessage
from localllm.api.wire import ToolCall
from localllm.compat.frames import content_parts
from localllm.compat.openai.types import ChatMessage as OpenAIMessage
from localllm.errors import InvalidRequest

_bad = InvalidRequest


def _content(content: Any) -> tuple[str, list[str]]:
    """A message's content -> (text, images).  An ``image_url`` part leaves ``[img]``
    where it was (the native path puts that image there) and its URL in ``images``:
    a ``data:`` URL, or an http(s) one that the native path fetches or refuses."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    images: list[str] = []
    for kind, part in content_parts(content):
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            spec = part.get("image_url")
            url = spec.get("url") if isinstance(spec, Mapping) else spec
            if not isinstance(url, str) or not url:
                raise _bad("image_url.url must be a string (a data: URL)")
            images.append(url)
            texts.append("[img]")
        elif kind in ("input_image", "input_audio", "file"):
            raise _bad(f"content part type {kind!r} is not supported")
        else:
            raise _bad(f"invalid content part type {kind!r}")
    return "\n".join(texts), images


def _tool_calls(calls: object) -> list[ToolCall]:
    if not isinstance(calls, list):
        raise _bad("tool_calls must be an array")
    out: list[ToolCall] = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise _bad("each tool call needs a function with a name")
        args = fn.get("arguments") or "{}"
        if isinstance(args, str):
            try:
                args = json.loads(args, object_pairs_hook=dict)
            except ValueError:
                raise _bad(f"invalid tool call arguments for {fn['name']!r}") from None
        if not isinstance(args, dict):
            raise _bad(f"tool call arguments for {fn['name']!r} must be a JSON object")
        native: ToolCall = {"function": {"index": i, "name": fn["name"], "arguments": args}}
        if isinstance(call.get("id"), str):
            native["id"] = call["id"]
        out.append(native)
    return out


def messages_to_native(messages: list[OpenAIMessage] | None) -> list[ChatMessage]:
    """OpenAI chat messages -> Ollama messages (``image_url`` parts become ``images``)."""
    if not isinstance(messages, list):
        raise _bad("messages must be an array")
    out: list[ChatMessage] = []
    call_names: dict[str, str] = {}
    for msg in messages:
        if not isinstance(msg, Mapping):
            raise _bad("each message must be an object")
        role = str(msg.get("role", "")).lower()
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise _bad(f"invalid message role {msg.get('role')!r}")
        text, images = _content(msg.get("content"))
        native: ChatMessage = {"role": role, "content": text}
        if images:
            native["images"] = images
        reasoning = msg.get("reasoning") or msg.get("reasoning_content")
        if role == "assistant" and isinstance(reasoning, str):
            native["thinking"] = reasoning
        if role == "assistant" and msg.get("tool_calls"):
            native["tool_calls"] = _tool_calls(msg["tool_calls"])
            for call in native["tool_calls"]:
                if "id" in call:
                    call_names[call["id"]] = call["function"]["name"]
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if isinstance(call_id, str):
                native["tool_call_id"] = call_id
            name = msg.get("name") or call_names.get(call_id or "")
            if isinstance(name, str) and name:
                native["tool_name"] = name
        out.append(native)
    return out
