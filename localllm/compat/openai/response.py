"""Native (Ollama-shaped) results -> OpenAI's whole answers: completions, embeddings, models.

``chat_completion`` and ``text_completion`` turn the folded native result of
each choice into one ``chat.completion`` / ``text_completion`` object (the
streamed twins are in :mod:`localllm.compat.openai.stream`).  Tool-call
arguments become JSON strings and a reply with tool calls finishes with
``"tool_calls"``, as OpenAI clients expect.  ``embeddings_response`` and the
model objects answer ``/v1/embeddings`` and ``/v1/models``.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Sequence
from typing import Literal

from localllm.api.wire import (
    ChatChunk,
    EmbedResponse,
    GenerateChunk,
    Logprob,
    Metrics,
    TagsEntry,
    ToolCall,
)
from localllm.compat.frames import new_id
from localllm.compat.openai.types import (
    AssistantMessage,
    ChatChoice,
    Completion,
    Embedding,
    EmbeddingList,
    FunctionCallOut,
    Logprobs,
    ModelList,
    ModelObject,
    TextChoice,
    TokenLogprob,
    ToolCallOut,
    Usage,
)
from localllm.format import parse_timestamp

FINGERPRINT = "fp_ollama"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
    """OpenAI's usage; ``cached_tokens``: the part of the prompt the prompt cache held."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def native_usage(natives: Sequence[Metrics]) -> Usage:
    """Every choice's completion; the prompt (one for all choices) from the first."""
    prompt = int(natives[0].get("prompt_eval_count") or 0) if natives else 0
    cached = int(natives[0].get("prompt_cached_count") or 0) if natives else 0
    completion = sum(int(n.get("eval_count") or 0) for n in natives)
    return usage(prompt, completion, cached)


def tool_calls_to_openai(
    calls: Sequence[ToolCall], *, start: int = 0, with_index: bool = False
) -> list[ToolCallOut]:
    out: list[ToolCallOut] = []
    for i, call in enumerate(calls, start):
        fn = call.get("function") or {}
        args: object = fn.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        call_id = call.get("id") or new_id("call_")
        function: FunctionCallOut = {"name": fn.get("name", ""), "arguments": text}
        item: ToolCallOut = (
            {"index": i, "id": call_id, "type": "function", "function": function}
            if with_index
            else {"id": call_id, "type": "function", "function": function}
        )
        out.append(item)
    return out


def logprobs_to_openai(entries: Sequence[Logprob] | None) -> Logprobs | None:
    """Ollama's ``logprobs`` list -> OpenAI's ``{"content": [...]}``; None when absent."""
    if not entries:
        return None
    content: list[TokenLogprob] = []
    for e in entries:
        token = e.get("token", "")
        content.append(
            {
                "token": token,
                "logprob": e.get("logprob", 0.0),
                "bytes": e.get("bytes") or list(token.encode("utf-8")),
                "top_logprobs": [
                    {
                        "token": t.get("token", ""),
                        "logprob": t.get("logprob", 0.0),
                        "bytes": t.get("bytes") or list(t.get("token", "").encode("utf-8")),
                    }
                    for t in e.get("top_logprobs") or []
                ],
            }
        )
    return {"content": content}


def finish_reason(native: Metrics, had_tool_calls: bool) -> str:
    reason = native.get("done_reason") or "stop"
    if reason == "stop" and had_tool_calls:
        return "tool_calls"
    return "length" if reason == "length" else "stop"


def chat_completion(
    natives: Sequence[ChatChunk], *, model: str, id: str | None = None, created: int | None = None
) -> Completion:
    """Final ``/api/chat`` responses (one per choice) -> a ``chat.completion`` object."""
    choices: list[ChatChoice] = []
    for i, native in enumerate(natives):
        msg = native.get("message") or {}
        calls = msg.get("tool_calls") or []
        message: AssistantMessage = {"role": "assistant", "content": msg.get("content", "")}
        if msg.get("thinking"):
            message["reasoning"] = msg["thinking"]
        if calls:
            message["tool_calls"] = tool_calls_to_openai(calls)
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": logprobs_to_openai(native.get("logprobs")),
                "finish_reason": finish_reason(native, bool(calls)),
            }
        )
    cid = id or new_id("chatcmpl-")
    return _completion("chat.completion", cid, created, model, choices, natives)


def text_completion(
    natives: Sequence[GenerateChunk],
    *,
    model: str,
    id: str | None = None,
    created: int | None = None,
    echo: str = "",
) -> Completion:
    """Final ``/api/generate`` responses (one per choice) -> a ``text_completion`` object;
    ``echo`` (the prompt, when the request asked for it) starts each choice's text."""
    choices: list[TextChoice] = [
        {
            "index": i,
            "text": echo + n.get("response", ""),
            "logprobs": logprobs_to_openai(n.get("logprobs")),
            "finish_reason": finish_reason(n, False),
        }
        for i, n in enumerate(natives)
    ]
    return _completion("text_completion", id or new_id("cmpl-"), created, model, choices, natives)


def _completion(
    kind: Literal["chat.completion", "text_completion"],
    id: str,
    created: int | None,
    model: str,
    choices: list[ChatChoice] | list[TextChoice],
    natives: Sequence[Metrics],
) -> Completion:
    """The object around the choices; ``created`` defaults to now."""
    return {
        "id": id,
        "object": kind,
        "created": created if created is not None else int(time.time()),
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": choices,
        "usage": native_usage(natives),
    }


def embeddings_response(
    native: EmbedResponse, model: str, encoding_format: str = "float"
) -> EmbeddingList:
    """``/api/embed`` response -> OpenAI's embeddings list with usage."""
    data: list[Embedding] = []
    for i, vector in enumerate(native.get("embeddings") or []):
        value: tuple[float, ...] | str = vector
        if encoding_format == "base64":
            value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
        data.append({"object": "embedding", "embedding": value, "index": i})
    tokens = int(native.get("prompt_eval_count") or 0)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _unix(timestamp: object) -> int:
    return int(parse_timestamp(timestamp)) if isinstance(timestamp, str) else 0


def model_object(entry: TagsEntry) -> ModelObject:
    """One ``/api/tags`` entry -> an OpenAI model object (owner = namespace, else "library")."""
    name = str(entry.get("name") or entry.get("model") or "")
    base = name[: name.rfind(":")] if ":" in name.rsplit("/", 1)[-1] else name
    path = base.split("/")
    owner = path[-2] if len(path) >= 2 else "library"
    return {
        "id": name,
        "object": "model",
        "created": _unix(entry.get("modified_at")),
        "owned_by": owner,
    }


def models_list(entries: Sequence[TagsEntry]) -> ModelList:
    return {"object": "list", "data": [model_object(e) for e in entries]}
