"""OpenAI Responses API ``input`` items -> native ``/api/chat`` messages.

Pure converter, owned here, used by :mod:`localllm.compat.responses.request`.
Items: messages (string content, or ``input_text``/``output_text``/``refusal``
parts, and ``input_image`` as a data: URL or bare base64, which becomes the
native ``images`` field), ``function_call`` (joins the assistant turn before
it, as the native ``tool_calls``), ``function_call_output`` (a ``tool``
message, named after its call) and ``reasoning`` (the next assistant turn's
``thinking``).  Anything else is a 400 (``item_reference`` too: send the item
itself, or continue a stored response with ``previous_response_id``).  A stored
history (:mod:`localllm.compat.responses.stored`) goes ahead of the input, item
by item, exactly as the request that first sent it was read.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import cast

from localllm.api.bodies import ChatMessage
from localllm.api.wire import JSONObject
from localllm.compat.frames import content_parts, string_field
from localllm.compat.responses.types import InputItem, InputPart
from localllm.errors import InvalidRequest

_bad = InvalidRequest


def _image(part: InputPart) -> str:
    """An ``input_image`` part -> the base64 payload the native ``images`` field holds."""
    if part.get("file_id") is not None:
        raise _bad("input_image.file_id is not supported: send the image as a data: URL")
    url = string_field(part.get("image_url"), "input_image.image_url")
    if url.startswith("data:"):
        head, comma, url = url.partition(",")
        if not comma or not head.endswith(";base64"):
            raise _bad("input_image.image_url must be a base64 data: URL")
    elif url.startswith(("http://", "https://")):
        raise _bad("input_image.image_url: remote URLs are not fetched; send a data: URL")
    try:
        base64.b64decode(url, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("input_image.image_url is not valid base64") from None
    return url


def _content(content: object, role: str) -> tuple[str, list[str]]:
    """A message's content (string or parts) -> (text, base64 images)."""
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    images: list[str] = []
    for kind, part in content_parts(content):
        if kind in ("input_text", "output_text", "text"):
            texts.append(string_field(part.get("text"), f"{kind}.text"))
        elif kind == "refusal" and role == "assistant":
            texts.append(string_field(part.get("refusal"), "refusal.refusal"))
        elif kind == "input_image":
            images.append(_image(part))
        elif kind in ("input_file", "input_audio"):
            raise _bad(f"content part type {kind!r} is not supported")
        else:
            raise _bad(f"invalid content part type {kind!r}")
    return "\n".join(texts), images


def _arguments(raw: object, name: str) -> JSONObject:
    try:
        args = (
            raw
            if isinstance(raw, Mapping)
            else json.loads(string_field(raw, "function_call.arguments") or "{}")
        )
    except ValueError:
        raise _bad(f"invalid function_call arguments for {name!r}") from None
    if not isinstance(args, Mapping):
        raise _bad(f"function_call arguments for {name!r} must be a JSON object")
    return dict(args)


def _output_text(output: object) -> str:
    """``function_call_output.output``: a string, or input_text parts."""
    text, images = _content(output, "tool")
    if images:
        raise _bad("images in function_call_output are not supported")
    return text


class _Items:
    """Builds native messages from Responses input items, in order."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self.call_names: dict[str, str] = {}
        self.thinking: str | None = None  # a reasoning item waiting for its assistant turn

    def _assistant(self) -> ChatMessage:
        """The assistant message a function_call joins: the last one, unless a turn followed."""
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": ""}
            self.messages.append(last)
        if self.thinking is not None:
            last["thinking"] = self.thinking
            self.thinking = None
        return last

    def message(self, item: InputItem) -> None:
        role = item.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant"):
            raise _bad(f"invalid message role {item.get('role')!r}")
        text, images = _content(item.get("content"), str(role))
        native: ChatMessage = {"role": role, "content": text}
        if images:
            native["images"] = images
        if role == "assistant" and self.thinking is not None:
            native["thinking"] = self.thinking
        self.thinking = None  # reasoning belongs to the assistant turn right after it
        self.messages.append(native)

    def function_call(self, item: InputItem) -> None:
        name = string_field(item.get("name"), "function_call.name")
        call_id = string_field(item.get("call_id"), "function_call.call_id")
        turn = self._assistant()
        calls = turn.setdefault("tool_calls", [])
        args = _arguments(item.get("arguments"), name)
        calls.append(
            {"id": call_id, "function": {"index": len(calls), "name": name, "arguments": args}}
        )
        self.call_names[call_id] = name

    def function_call_output(self, item: InputItem) -> None:
        call_id = string_field(item.get("call_id"), "function_call_output.call_id")
        native: ChatMessage = {
            "role": "tool",
            "content": _output_text(item.get("output")),
            "tool_call_id": call_id,
        }
        if call_id in self.call_names:
            native["tool_name"] = self.call_names[call_id]
        self.messages.append(native)

    def mcp_call(self, item: InputItem) -> None:
        """An MCP call the daemon made earlier: the call, then what it gave (or its error)."""
        call_id = item.get("id") or f"mcp_{len(self.messages)}"
        self.function_call({**item, "call_id": call_id})
        error = item.get("error")
        output = item.get("output")
        text = output if isinstance(output, str) else f"error: {json.dumps(error)}"
        self.function_call_output({"call_id": call_id, "output": text})

    def reasoning(self, item: InputItem) -> None:
        # Sent back by clients (Codex) with the turn it preceded; it becomes that turn's thinking.
        parts = [*(item.get("summary") or []), *(item.get("content") or [])]
        texts = [p.get("text") for p in parts if isinstance(p, Mapping)]
        self.thinking = "\n".join(t for t in texts if isinstance(t, str))

    def add(self, item: InputItem) -> None:
        if not isinstance(item, Mapping):
            raise _bad("each input item must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            self.message(item)
        elif kind == "function_call":
            self.function_call(item)
        elif kind == "function_call_output":
            self.function_call_output(item)
        elif kind == "reasoning":
            self.reasoning(item)
        elif kind == "mcp_call":
            self.mcp_call(item)
        elif kind in ("mcp_list_tools", "mcp_approval_request", "mcp_approval_response"):
            pass  # read by the daemon's MCP loop (server/responses_mcp.py), not the model
        elif kind == "item_reference":
            raise _bad(
                "item_reference is not supported: send the item itself, or continue a "
                "stored response with previous_response_id"
            )
        else:
            raise _bad(f"input item type {kind!r} is not supported")


def check_items(value: list[object]) -> None:
    """A 400 unless every item of ``value`` is an input item this converter reads."""
    items = _Items()
    for item in value:
        items.add(cast(InputItem, item))  # ``add`` checks it


def input_to_messages(
    value: object,
    instructions: str | None = None,
    history: Sequence[Mapping[str, object]] = (),
) -> list[ChatMessage]:
    """``instructions`` + ``history`` (stored items) + ``input`` (a string or items) ->
    native chat messages."""
    items = _Items()
    if instructions:
        items.messages.append({"role": "system", "content": instructions})
    for old in history:
        items.add(cast(InputItem, old))  # stored as it was sent, and read then
    if isinstance(value, str):
        items.messages.append({"role": "user", "content": value})
    elif isinstance(value, list):
        for item in value:
            items.add(item)
    else:
        raise _bad("input must be a string or an array of input items")
    if not any(m["role"] != "system" for m in items.messages):
        raise _bad("input must contain at least one message")
    return items.messages
