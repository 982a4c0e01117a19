"""OpenAI Responses API requests (``POST /v1/responses``) -> native ``/api/chat`` bodies.

Pure converter, owned here; the route is :mod:`localllm.server.routes_responses`
and the answer is shaped by :mod:`localllm.compat.responses.stream`.  The
sampling, tool, format and reasoning fields are first rewritten into a Chat
Completions body and handed to :func:`~localllm.compat.openai.request.chat_request_to_native`,
so ``/v1/responses`` and ``/v1/chat/completions`` share one set of defaults and
checks.  ``input`` items are converted apart, by
:mod:`localllm.compat.responses.input`, because they carry things Chat
Completions parts cannot (``input_image`` becomes the native ``images`` field,
which the chat path itself refuses while vision is missing).

``store`` (true unless false, as OpenAI's), ``previous_response_id`` and
``conversation`` are read here and echoed; the stored history they name is
looked up by the route (:mod:`localllm.server.stored`) and given to
:func:`responses_request_to_native` as ``history``, ahead of ``input``; this
request's own items, with their ids, are :attr:`ResponsesConversion.input_items`,
which the route stores.  ``prompt`` (stored prompts) is refused.  Other fields
follow :mod:`localllm.compat.fields`; hosted tools are dropped, and all that was
dropped or ignored is :attr:`ResponsesConversion.ignored`, which the route logs
once per client.  ``truncation`` defaults to ``"disabled"``
as in OpenAI's API, so an input longer than the context is a 400 rather than
silently cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from localllm.api.bodies import ChatBody, FunctionSpec, Tool
from localllm.api.wire import JSONObject
from localllm.compat.fields import RESPONSES_IGNORED, RESPONSES_USED, audit
from localllm.compat.frames import string_field
from localllm.compat.openai.request import chat_request_to_native
from localllm.compat.openai.types import ChatCompletionRequest, ResponseFormat
from localllm.compat.responses.input import input_to_messages
from localllm.compat.responses.stored import conversation_ref, input_items
from localllm.compat.responses.types import Echo, FunctionTool, ResponsesRequest
from localllm.errors import InvalidRequest

# Responses efforts, passed on to the Chat Completions converter, which maps each to a
# think level and a thinking budget (``none`` turns thinking off).
_EFFORT = {
    "none": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}
# Fields the daemon cannot honour without a hosted service: refused, not ignored.
_STATEFUL = ("prompt",)
# OpenAI's limits on ``metadata`` (pairs, key length, value length); it is stored with the
# response and repeated in the response and in every stream event.
METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512


@dataclass
class ResponsesConversion:
    native: ChatBody
    stream: bool = False
    tool_choice: str = "auto"  # "auto" | "none" | "required"
    forced_tool: str | None = None
    forced_tools: list[Tool] | None = None  # the model must call one of these
    echo: Echo = field(default_factory=lambda: Echo())  # request fields the response repeats
    ignored: list[str] = field(default_factory=list)  # fields ignored, for the route's log
    input_items: list[JSONObject] = field(default_factory=list)  # this input, as stored


_bad = InvalidRequest


def _tools(tools: object, ignored: list[str]) -> list[Tool] | None:
    """Flat Responses function tools -> the nested Chat Completions shape; the others
    (hosted tools) are named in ``ignored``."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _bad("tools must be an array")
    out: list[Tool] = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            raise _bad("tools[] must be objects")
        kind = tool.get("type")
        if kind != "function":
            # Agents such as Codex offer hosted tools (web search, custom/freeform tools)
            # alongside their function tools; a local model cannot call those, but refusing
            # the whole request would make the agent unusable, so they are left out.
            ignored.append(f"a {kind!r} tool (only function tools reach a local model)")
            continue
        name = string_field(tool.get("name"), "tools[].name")
        about = tool.get("description")
        about = None if about is None else string_field(about, "tools[].description")
        params = tool.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise _bad("tools[].parameters must be an object")
        schema = dict(params or {"type": "object", "properties": {}})
        fn: FunctionSpec = (
            {"name": name, "parameters": schema}
            if about is None
            else {"name": name, "description": about, "parameters": schema}
        )
        out.append({"type": "function", "function": fn})
    return out


def _flat(tool: Tool) -> FunctionTool:
    """A native tool as the response repeats it: flat, as Responses tools are."""
    fn = tool["function"]
    if "description" in fn:
        return {
            "type": "function",
            "name": fn["name"],
            "description": fn["description"],
            "parameters": fn["parameters"],
        }
    return {"type": "function", "name": fn["name"], "parameters": fn["parameters"]}


def _tool_choice(choice: object) -> object:
    """Responses' ``tool_choice`` in Chat Completions' words (which that converter checks)."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _bad("tool_choice must be none, auto, required or {type: function, name}")


def _response_format(text: object) -> ResponseFormat | None:
    if text is not None and not isinstance(text, Mapping):
        raise _bad("text must be an object")
    fmt = text.get("format") if text is not None else None
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "json_schema":  # flat in Responses, nested under json_schema in Chat
        if not isinstance(fmt.get("schema"), Mapping):
            raise _bad("text.format.schema must be an object")
        return {"type": "json_schema", "json_schema": {"schema": fmt["schema"]}}
    if kind in ("text", "json_object"):
        return {"type": kind}
    raise _bad(f"invalid text.format type {kind!r}")


def check_metadata(metadata: object) -> dict[str, str]:
    """``metadata`` checked as OpenAI does: up to 16 string pairs, keys of up to 64
    characters, values of up to 512 (it is echoed in every event of a stream)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise _bad("metadata must be an object of string values")
    if len(metadata) > METADATA_PAIRS:
        raise _bad(f"metadata has {len(metadata)} pairs; at most {METADATA_PAIRS} are allowed")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY:
            raise _bad(f"metadata keys are at most {METADATA_KEY} characters, got {len(key)}")
        if not isinstance(value, str):
            raise _bad(f"metadata.{key} must be a string")
        if len(value) > METADATA_VALUE:
            raise _bad(f"metadata.{key} is at most {METADATA_VALUE} characters, got {len(value)}")
    return dict(metadata)


def _effort(reasoning: object) -> str | None:
    if reasoning is not None and not isinstance(reasoning, Mapping):
        raise _bad("reasoning must be an object")
    effort = reasoning.get("effort") if reasoning is not None else None
    if effort is not None and effort not in _EFFORT:
        raise _bad(f"invalid reasoning.effort {effort!r}")
    return _EFFORT[effort] if effort is not None else None


def responses_request_to_native(
    body: ResponsesRequest, history: Sequence[JSONObject] = ()
) -> ResponsesConversion:
    """A ``/v1/responses`` body -> an ``/api/chat`` body plus what the route must do;
    ``history``: the stored items it continues (see the module docstring)."""
    if not isinstance(body, Mapping):
        raise _bad("request body must be a JSON object")
    for key in _STATEFUL:
        if body.get(key) is not None:
            raise _bad(f"{key} is not supported: no stored prompts here; send the instructions")
    if body.get("background"):
        raise _bad("background responses are not supported")
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _bad("max_output_tokens must be a positive integer")
    truncation = body.get("truncation") or "disabled"
    if truncation not in ("auto", "disabled"):
        raise _bad('truncation must be "auto" or "disabled"')
    metadata = check_metadata(body.get("metadata"))
    instructions = body.get("instructions")
    instructions = None if instructions is None else string_field(instructions, "instructions")
    ignored = audit(body, RESPONSES_USED, RESPONSES_IGNORED) + _nested_ignored(body)
    tools = _tools(body.get("tools"), ignored)
    chat: dict[str, object] = {
        "model": body.get("model"),
        "stream": body.get("stream", False),
        "messages": [],
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_completion_tokens": limit,
        "tools": tools,
        "tool_choice": _tool_choice(body.get("tool_choice")),
        "reasoning_effort": _effort(body.get("reasoning")),
        "response_format": _response_format(body.get("text")),
    }
    if body.get("options") is not None:  # our extension, as on /v1/chat/completions
        chat["options"] = body["options"]
    # Absent, not null; the values are the client's, which the Chat Completions
    # converter checks.
    conv = chat_request_to_native(
        cast(ChatCompletionRequest, {k: v for k, v in chat.items() if v is not None})
    )
    conv.native["messages"] = input_to_messages(body.get("input"), instructions, history)
    conv.native["truncate"] = truncation == "auto"
    echo: Echo = {
        "instructions": instructions,
        "max_output_tokens": limit,
        "temperature": conv.native["options"].get("temperature"),
        "top_p": conv.native["options"].get("top_p"),
        "tools": [_flat(t) for t in tools or []],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
        "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
        "truncation": truncation,
        "metadata": metadata,
        **stored_state(body),
    }
    return ResponsesConversion(
        conv.native,
        stream=conv.stream,
        tool_choice=conv.tool_choice,
        forced_tool=conv.forced_tool,
        forced_tools=conv.forced_tools,
        echo=echo,
        ignored=ignored,
        input_items=input_items(body.get("input")),
    )


def stored_state(body: ResponsesRequest) -> Echo:
    """``store``, ``previous_response_id`` and ``conversation``, checked, as echoed (the
    route reads them first, to find the history)."""
    store = body.get("store", True)
    if not isinstance(store, bool) and store is not None:
        raise _bad("store must be a boolean")
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise _bad("previous_response_id must be a response id")
    conversation = conversation_ref(body.get("conversation"))
    if previous is not None and conversation is not None:
        raise _bad("previous_response_id and conversation cannot be used together")
    return {
        "store": store is not False,
        "previous_response_id": previous,
        "conversation": None if conversation is None else {"id": conversation},
    }


def _nested_ignored(body: ResponsesRequest) -> list[str]:
    """The parts of ``reasoning`` and ``text`` that change nothing here."""
    out = []
    reasoning, text = body.get("reasoning"), body.get("text")
    if isinstance(reasoning, Mapping) and reasoning.get("summary") is not None:
        out.append("reasoning.summary (thinking is returned whole, not summarised)")
    if isinstance(text, Mapping) and text.get("verbosity") is not None:
        out.append("text.verbosity (a local model has no verbosity dial)")
    return out
