"""Anthropic Messages requests (``/v1/messages``) -> our native ``/api/chat`` requests.

Pure converters, the Anthropic twin of :mod:`localllm.compat.openai.request`:
``messages_request_to_native`` turns the body into an ``/api/chat`` body plus
what the route must do (stream, force a tool).  The answer comes from
:mod:`localllm.compat.anthropic.response` and :mod:`localllm.compat.anthropic.stream`,
Anthropic's error shape from :mod:`localllm.compat.anthropic.errors`.  Where the
mapping is not one to one:

- ``system`` (a string or text blocks) becomes the first ``system`` message,
  less a block that is Claude Code's ``x-anthropic-billing-header:`` line: it is
  not part of the conversation, and keeping it out of the prompt keeps the prefix
  the same when the agent's version changes.
- A message with ``"role": "system"`` in ``messages`` (Claude Code sends one after
  the first user turn) stays a ``system`` message at its place; where the model's
  template has no system turn there, rendering folds it into a user turn
  (template/systemturns.py).
- A user message's ``tool_result`` blocks become native ``tool`` messages, in
  block order, named after the ``tool_use`` they answer; its text and images
  a ``user`` message.  Images (base64 only) go to the native ``images`` field,
  as ``/api/chat`` takes them.
- An assistant's ``thinking`` blocks become ``thinking``, its ``tool_use``
  blocks ``tool_calls`` (ids kept); ``redacted_thinking`` is dropped.
- ``tools``: custom tools only.  Server tools (``web_search_*``, ``bash_*``, ...)
  and ``mcp_servers`` are dropped and named in :attr:`MessagesConversion.ignored`:
  a local model cannot call what runs on Anthropic's side, and refusing them
  would stop the agent.  ``tool_choice``: ``none`` drops the tools; ``any`` and
  ``tool`` (only the named tool kept) force a call, as OpenAI's ``required`` does.
- ``thinking``, ``output_config.effort`` and ``context_management``: see
  :mod:`localllm.compat.anthropic.thinking`.  ``output_config.format``
  (``json_schema``) is the native ``format``.
- ``truncate`` is off: Anthropic never drops part of a prompt silently, so a
  prompt longer than the context is a 400, not a shortened conversation.
- Every other top-level field follows :mod:`localllm.compat.fields`;
  ``cache_control`` on blocks and tools is ignored (prefix reuse is automatic).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localllm.api.bodies import ChatBody, ChatMessage, FunctionSpec, Options, Tool
from localllm.api.wire import JSONObject, ToolCall
from localllm.compat.anthropic.thinking import context_edits, thinking
from localllm.compat.anthropic.types import ContentBlock, MessagesRequest
from localllm.compat.fields import ANTHROPIC_IGNORED, ANTHROPIC_USED, audit
from localllm.compat.frames import number
from localllm.errors import InvalidRequest

# The first system block Claude Code sends: billing metadata, not instructions.
BILLING_HEADER = "x-anthropic-billing-header:"


@dataclass
class MessagesConversion:
    native: ChatBody
    stream: bool = False
    forced_tools: list[Tool] | None = None  # the model must call one of these
    omit_thinking: bool = False  # ``thinking.display: "omitted"``
    ignored: list[str] = field(default_factory=list)  # what was dropped, for the log


def _number(body: Mapping[str, Any], key: str, *, integer: bool = False, low: int = 0) -> Any:
    """``body[key]`` checked as a finite number (an integer with ``integer``) >= ``low``."""
    return number(body, key, integer=integer, low=low, where=f"{key}:")


def _blocks(content: object, where: str) -> list[ContentBlock]:
    """A content field as blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, Mapping) for b in content):
        raise InvalidRequest(f"{where}: must be a string or an array of content blocks")
    return list(content)


def _text(block: ContentBlock, where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"{where}: a text block needs a string text")
    return text


def _image(block: ContentBlock, where: str) -> str:
    """An image block's base64 data, checked: the native path takes base64 strings."""
    source = block.get("source")
    if not isinstance(source, Mapping) or source.get("type") != "base64":
        raise InvalidRequest(f"{where}: only base64 image sources are supported")
    data = source.get("data")
    if not isinstance(data, str) or not data:
        raise InvalidRequest(f"{where}: image source data must be a base64 string")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where}: image source data is not valid base64") from None
    return data


def _unknown(kind: object, where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: content block type {kind!r} is not supported")


def _system(value: object, where: str = "system") -> str:
    """A system prompt's text: its text blocks joined, less a billing-header line."""
    if value is None:
        return ""
    parts = []
    for i, block in enumerate(_blocks(value, where)):
        if block.get("type") != "text":
            raise _unknown(block.get("type"), f"{where}.{i}")
        text = _text(block, f"{where}.{i}")
        if not text.startswith(BILLING_HEADER):
            parts.append(text)
    return "\n".join(parts)


def _tool_result(block: ContentBlock, where: str, names: Mapping[str, str]) -> ChatMessage:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{where}: tool_result needs a tool_use_id")
    texts: list[str] = []
    images: list[str] = []
    content = block.get("content")
    for j, part in enumerate(_blocks(content if content is not None else "", where)):
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part, f"{where}.content.{j}"))
        elif kind == "image":
            images.append(_image(part, f"{where}.content.{j}"))
        else:
            raise _unknown(kind, f"{where}.content.{j}")
    out: ChatMessage = {"role": "tool", "content": "\n".join(texts), "tool_call_id": call_id}
    if call_id in names:
        out["tool_name"] = names[call_id]
    if images:
        out["images"] = images
    return out


def _user(blocks: list[ContentBlock], where: str, names: Mapping[str, str]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    texts: list[str] = []
    images: list[str] = []

    def flush() -> None:
        if texts or images:
            msg: ChatMessage = {"role": "user", "content": "\n".join(texts)}
            if images:
                msg["images"] = list(images)
            out.append(msg)
            texts.clear()
            images.clear()

    for i, block in enumerate(blocks):
        kind, at = block.get("type"), f"{where}.content.{i}"
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "image":
            images.append(_image(block, at))
        elif kind == "tool_result":
            flush()  # keeps the order the client wrote
            out.append(_tool_result(block, at, names))
        else:
            raise _unknown(kind, at)
    flush()
    return out


def _assistant(blocks: list[ContentBlock], where: str, names: dict[str, str]) -> ChatMessage:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(blocks):
        kind, at = block.get("type"), f"{where}.content.{i}"
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "thinking":
            if not isinstance(block.get("thinking"), str):
                raise InvalidRequest(f"{at}: a thinking block needs a string thinking")
            thinking.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue  # encrypted for Anthropic's models: nothing a local model can read
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            args: object = block.get("input", {})
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                raise InvalidRequest(f"{at}: tool_use needs a string id and name")
            if not isinstance(args, Mapping):
                raise InvalidRequest(f"{at}: tool_use input must be an object")
            names[call_id] = name
            calls.append(
                {
                    "id": call_id,
                    "function": {"index": len(calls), "name": name, "arguments": dict(args)},
                }
            )
        else:
            raise _unknown(kind, at)
    msg: ChatMessage = {"role": "assistant", "content": "".join(texts)}
    if thinking:
        msg["thinking"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def messages_to_native(messages: object) -> list[ChatMessage]:
    """Anthropic messages -> Ollama messages (see the module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty array")
    out: list[ChatMessage] = []
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results that follow
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(msg, Mapping):
            raise InvalidRequest(f"{where}: must be an object")
        role = msg.get("role")
        if role == "system":
            text = _system(msg.get("content"), f"{where}.content")
            if text:
                out.append({"role": "system", "content": text})
            continue
        blocks = _blocks(msg.get("content"), f"{where}.content")
        if role == "user":
            out += _user(blocks, where, names)
        elif role == "assistant":
            out.append(_assistant(blocks, where, names))
        else:
            raise InvalidRequest(f'{where}.role: must be "user", "assistant" or "system"')
    return out


def _tools(body: MessagesRequest, ignored: list[str]) -> tuple[list[Tool] | None, bool]:
    """(native tools, whether a call is forced) from ``tools`` and ``tool_choice``;
    server tools and MCP servers go to ``ignored``."""
    raw = body.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise InvalidRequest("tools: must be an array")
    servers = body.get("mcp_servers")
    if servers:
        ignored.append(f"mcp_servers ({len(servers)}: the MCP connector runs on Anthropic's side)")
    tools: list[Tool] = []
    for i, tool in enumerate(raw or []):
        if not isinstance(tool, Mapping):
            raise InvalidRequest(f"tools.{i}: must be an object")
        if tool.get("type") not in (None, "custom"):
            ignored.append(f"tools.{i} ({tool.get('type')!r}: a server tool)")
            continue
        if not isinstance(tool.get("name"), str):
            raise InvalidRequest(f"tools.{i}: needs a name")
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            raise InvalidRequest(f"tools.{i}.input_schema: must be an object")
        fn: FunctionSpec = {"name": tool["name"], "parameters": dict(schema)}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        tools.append({"type": "function", "function": fn})
    choice = body.get("tool_choice")
    if choice is None:
        return tools or None, False
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    if kind == "auto":
        return tools or None, False
    if kind == "none":
        return None, False
    if kind == "any":
        if not tools:
            raise InvalidRequest('tool_choice: "any" needs tools')
        return tools, True
    if kind == "tool":
        assert isinstance(choice, Mapping)
        chosen = [t for t in tools if t["function"]["name"] == choice.get("name")]
        if not chosen:
            raise InvalidRequest(f"tool_choice: {choice.get('name')!r} is not in tools")
        return chosen, True
    raise InvalidRequest("tool_choice: type must be auto, any, tool or none")


def _options(body: MessagesRequest, max_tokens: int | None) -> Options:
    # Only what the client sent: anything else keeps the model's own defaults.
    stop = body.get("stop_sequences")
    if stop is not None and (
        not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)
    ):
        raise InvalidRequest("stop_sequences: must be an array of strings")
    fields: Options = {
        "num_predict": max_tokens,
        "temperature": _number(body, "temperature"),
        "top_p": _number(body, "top_p"),
        "top_k": _number(body, "top_k", integer=True),
        "stop": list(stop) if stop else None,
    }
    return {k: v for k, v in fields.items() if v is not None}


def messages_request_to_native(
    body: MessagesRequest, *, count_only: bool = False
) -> MessagesConversion:
    """A ``/v1/messages`` (``count_only``: ``count_tokens``) body -> an ``/api/chat`` body."""
    if not isinstance(body, Mapping):
        raise InvalidRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: field required")
    if not count_only and body.get("max_tokens") is None:
        raise InvalidRequest("max_tokens: field required")
    max_tokens = None if count_only else _number(body, "max_tokens", integer=True, low=1)
    stream = body.get("stream", False) if not count_only else False
    if not isinstance(stream, bool):
        raise InvalidRequest("stream: must be a boolean")
    ignored = audit(body, ANTHROPIC_USED, ANTHROPIC_IGNORED)
    messages = messages_to_native(body.get("messages"))
    system = _system(body.get("system"))
    if system:
        messages.insert(0, {"role": "system", "content": system})
    think = thinking(body)
    context_edits(body, messages, think)
    native: ChatBody = {
        "model": model,
        "messages": messages,
        "stream": stream,
        "options": _options(body, max_tokens),
        "truncate": False,
    }
    tools, forced = _tools(body, ignored)
    if tools:
        native["tools"] = tools
    if think.think is not None:
        native["think"] = think.think
    if think.budget is not None:
        native["options"]["think_budget"] = think.budget
    fmt = _format(body)
    if fmt is not None:
        native["format"] = fmt
    return MessagesConversion(
        native,
        stream=stream,
        forced_tools=tools if forced else None,
        omit_thinking=think.omit,
        ignored=ignored + think.ignored,
    )


def _format(body: MessagesRequest) -> JSONObject | None:
    """``output_config.format`` (structured outputs) as the native ``format`` schema."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else None
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        raise InvalidRequest('output_config.format: type must be "json_schema"')
    schema = fmt.get("schema")
    if not isinstance(schema, Mapping):
        raise InvalidRequest("output_config.format.schema: must be an object")
    return dict(schema)
