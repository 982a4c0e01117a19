"""OpenAI ``/v1`` requests (chat, completions, embeddings) -> our native (Ollama-shaped) bodies.

Pure converters: the ``/v1`` routes call these, run the native use case, and
turn the result back with :mod:`localllm.compat.openai.response` (whole
answers, errors, models) or :mod:`localllm.compat.openai.stream` (SSE).
Behaviour follows Ollama's compatibility layer, with five additions:

- ``options``: an extra object passed through to the native ``options`` (so an
  OpenAI client can set ``num_ctx``); the OpenAI fields win over it.
- ``n``: returned as :attr:`ChatConversion.n`; the route runs that many generations.
- ``tool_choice``: ``"none"`` drops the tools; ``"required"`` keeps them and
  forces a call (:attr:`ChatConversion.forced_tools`); a named function keeps
  only that tool and forces it (:attr:`ChatConversion.forced_tool` names it),
  so the route may constrain the output with a grammar.  ``"auto"`` is the default.
- llama-server's fields: ``grammar`` (raw GBNF), ``logit_bias`` (also OpenAI's) and
  the samplers it names at the top level (``top_k``, ``min_p``, ``dry_*``, ``xtc_*``,
  ``mirostat``...; compat/fields.py ``LLAMA_SAMPLING``) become native options.
- ``reasoning_effort``: a ``think`` level and a thinking budget
  (api/thinkbudget.py), and llama-server's ``reasoning_budget_tokens`` (or
  ``thinking_budget_tokens``) and ``reasoning_budget_message`` set the budget exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localllm.api.bodies import ChatBody, EmbedBody, GenerateBody, Options, Tool
from localllm.api.thinkbudget import EFFORTS, LEVELS, check_budget, check_message
from localllm.api.wire import JSONObject
from localllm.compat.fields import CHAT_IGNORED, CHAT_REFUSED, CHAT_USED, LLAMA_SAMPLING, audit
from localllm.compat.frames import number
from localllm.compat.openai.messages import messages_to_native
from localllm.compat.openai.types import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
)
from localllm.errors import InvalidRequest

MAX_N = 16
# Effort -> the think level the template gets (gpt-oss's reasoning_effort).  Ollama's own
# levels bring their budgets; the two it lacks set options.think_budget (api/thinkbudget.py).
_LEVEL = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "max",
}
_bad = InvalidRequest


@dataclass
class ChatConversion:
    native: ChatBody
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    tool_choice: str = "auto"  # "auto" | "none" | "required"
    forced_tool: str | None = None
    forced_tools: list[Tool] | None = None  # the model must call one of these
    ignored: list[str] = field(default_factory=list)  # fields ignored, for the route's log


@dataclass
class CompletionConversion:
    native: GenerateBody
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    ignored: list[str] = field(default_factory=list)  # none: completions log no field table


def _number(body: Mapping[str, Any], key: str) -> float | None:
    value = number(body, key)
    return None if value is None else float(value)


def _integer(body: Mapping[str, Any], key: str, low: int | None = None) -> int | None:
    value: int | None = number(body, key, integer=True, low=low)
    return value


def _logprob_count(body: Mapping[str, Any], key: str) -> int | None:
    """How many alternatives per token ``key`` asks for: OpenAI takes 0 to 20."""
    count = _integer(body, key, 0)
    if count is not None and count > 20:
        raise _bad(f"{key} must be between 0 and 20")
    return count


def _stop(body: Mapping[str, Any]) -> list[str] | None:
    stop = body.get("stop")
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise _bad("stop must be a string or an array of strings")


def _options(body: Mapping[str, Any]) -> Options:
    """Sampling options: Ollama's OpenAI defaults <- the extra ``options`` <- OpenAI fields."""
    options: Options = {"temperature": 1.0, "top_p": 1.0}
    extra = body.get("options")
    if extra is not None:
        if not isinstance(extra, Mapping):
            raise _bad("options must be an object")
        options.update(extra)
    max_tokens = _integer(body, "max_completion_tokens", 0)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 0)
    fields = {
        "num_predict": max_tokens,
        "temperature": _number(body, "temperature"),
        "top_p": _number(body, "top_p"),
        "seed": _integer(body, "seed"),
        "frequency_penalty": _number(body, "frequency_penalty"),
        "presence_penalty": _number(body, "presence_penalty"),
        "stop": _stop(body),
    }
    options.update({k: v for k, v in fields.items() if v is not None})
    # llama-server's names, checked with the other options (api/options.py, api/samplers.py).
    options.update({k: body[k] for k in LLAMA_SAMPLING if body.get(k) is not None})
    return options


def _grammar(body: Mapping[str, Any]) -> str | None:
    """llama-server's ``grammar``: raw GBNF, which the runner parses (a 400 if it cannot)."""
    grammar = body.get("grammar")
    if grammar is not None and not isinstance(grammar, str):
        raise _bad("grammar must be a string of GBNF")
    return grammar or None


def _common(body: Mapping[str, Any]) -> tuple[str, bool, bool, int]:
    if not isinstance(body, Mapping):
        raise _bad("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model is required")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream must be a boolean")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, Mapping):
        raise _bad("stream_options must be an object")
    include_usage = bool(stream_options.get("include_usage", False)) and stream
    n = _integer(body, "n", 1) or 1
    if n > MAX_N:
        raise _bad(f"n must be at most {MAX_N}")
    return model, stream, include_usage, n


def _format(body: ChatCompletionRequest) -> str | JSONObject | None:
    rf = body.get("response_format")
    if rf is None:
        return None
    kind = rf.get("type") if isinstance(rf, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        spec = rf.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise _bad("response_format.json_schema.schema must be an object")
        return dict(schema)
    raise _bad(f"invalid response_format type {kind!r}")


def _tools(body: ChatCompletionRequest) -> tuple[list[Tool] | None, str, str | None]:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise _bad("tools must be an array")
    choice = body.get("tool_choice", "auto")
    if choice is None or choice == "auto":
        return tools or None, "auto", None
    if choice == "none":
        return None, "none", None
    if choice == "required":
        if not tools:
            raise _bad('tool_choice "required" needs tools')
        return tools, "required", None
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise _bad("tool_choice must be none, auto, required or a named function")
    chosen = [
        t
        for t in tools or []
        if isinstance(t, Mapping)
        and isinstance(t.get("function"), Mapping)
        and t["function"].get("name") == name
    ]
    if not chosen:
        raise _bad(f"tool_choice names {name!r}, which is not in tools")
    return chosen, "required", name


def _think(body: Mapping[str, Any], options: Options) -> bool | str | None:
    """``think`` for the effort, whose budget (api/thinkbudget.py) the think level carries
    or, for the efforts Ollama has no level for, ``options.think_budget``; llama-server's
    budget fields set the option too.  An explicit ``options.think_budget`` wins."""
    for key in ("reasoning_budget_tokens", "thinking_budget_tokens"):
        if body.get(key) is not None:
            options.setdefault("think_budget", check_budget(body[key], key))
    if body.get("reasoning_budget_message") is not None:
        options.setdefault(
            "think_budget_message",
            check_message(body["reasoning_budget_message"], "reasoning_budget_message"),
        )
    effort = body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    if effort is None and isinstance(reasoning, Mapping):
        effort = reasoning.get("effort")
    if effort is None:
        return None
    if effort == "none":
        return False
    if effort in _LEVEL:
        if effort not in LEVELS:
            options.setdefault("think_budget", EFFORTS[effort])
        return _LEVEL[effort]
    raise _bad(
        f"invalid reasoning effort {effort!r}, expected none, minimal, low, medium, "
        "high, xhigh or max"
    )


def chat_request_to_native(body: ChatCompletionRequest) -> ChatConversion:
    """``/v1/chat/completions`` body -> ``/api/chat`` body plus what the route must do."""
    model, stream, include_usage, n = _common(body)
    ignored = audit(body, CHAT_USED, CHAT_IGNORED, CHAT_REFUSED)
    native: ChatBody = {
        "model": model,
        "messages": messages_to_native(body.get("messages")),
        "stream": stream,
        "options": _options(body),
    }
    fmt = _format(body)
    if fmt is not None:
        native["format"] = fmt
    grammar = _grammar(body)
    if grammar is not None:
        native["grammar"] = grammar
    tools, choice, forced = _tools(body)
    if tools:
        native["tools"] = tools
    think = _think(body, native["options"])
    if think is not None:
        native["think"] = think
    if body.get("logprobs"):
        native["logprobs"] = True
        top = _logprob_count(body, "top_logprobs")
        if top is not None:
            native["top_logprobs"] = top
    if "keep_alive" in body:
        native["keep_alive"] = body["keep_alive"]
    return ChatConversion(
        native,
        n=n,
        stream=stream,
        include_usage=include_usage,
        tool_choice=choice,
        forced_tool=forced,
        forced_tools=tools if tools and choice == "required" else None,
        ignored=ignored,
    )


def completion_request_to_native(body: CompletionRequest) -> CompletionConversion:
    """``/v1/completions`` body -> ``/api/generate`` body."""
    model, stream, include_usage, n = _common(body)
    prompt: object = body.get("prompt", "")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("prompt must be a string")
    native: GenerateBody = {
        "model": model,
        "prompt": prompt,
        "stream": stream,
        "options": _options(body),
    }
    suffix = body.get("suffix")
    if isinstance(suffix, str) and suffix:
        native["suffix"] = suffix
    grammar = _grammar(body)
    if grammar is not None:
        native["grammar"] = grammar
    logprobs = _logprob_count(body, "logprobs")
    if logprobs is not None:
        native["logprobs"] = True
        native["top_logprobs"] = logprobs
    return CompletionConversion(
        native, n=n, stream=stream, include_usage=include_usage, echo=bool(body.get("echo"))
    )


def embedding_request_to_native(body: EmbeddingRequest) -> tuple[EmbedBody, str]:
    """``/v1/embeddings`` body -> (``/api/embed`` body, encoding_format)."""
    model, _, _, _ = _common({**body, "stream": False, "n": None})
    inputs: object = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise _bad("input must be a string or an array of strings (token arrays are not supported)")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise _bad('encoding_format must be "float" or "base64"')
    native: EmbedBody = {"model": model, "input": inputs}
    dims = _integer(body, "dimensions", 1)
    if dims is not None:
        native["dimensions"] = dims
    return native, str(encoding)
