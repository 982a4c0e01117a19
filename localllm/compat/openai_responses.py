"""Native (Ollama-shaped) responses -> OpenAI ``chat.completion`` / ``text_completion`` objects.

Non-streamed results are converted whole; streams go through :class:`ChatStream`
or :class:`CompletionStream`, one per choice, fed the native NDJSON objects in
order.  A stream reuses one ``id`` and one ``created`` for all its chunks; the
first chunk carries ``delta.role``, the last choice chunk has an empty delta
and the ``finish_reason``, and with ``include_usage`` a final chunk has
``choices: []`` and the usage.  Tool-call arguments become JSON strings and a
reply with tool calls finishes with ``"tool_calls"``, as OpenAI clients expect.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from localllm.compat.openai_chat import error_body

FINGERPRINT = "fp_ollama"


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _native_usage(natives: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    prompt = int(natives[0].get("prompt_eval_count") or 0) if natives else 0
    completion = sum(int(n.get("eval_count") or 0) for n in natives)
    return usage(prompt, completion)


def tool_calls_to_openai(calls: Sequence[Mapping[str, Any]], *, start: int = 0,
                         with_index: bool = False) -> list[dict[str, Any]]:
    out = []
    for i, call in enumerate(calls, start):
        fn = call.get("function") or {}
        args = fn.get("arguments", {})
        item: dict[str, Any] = {
            "id": call.get("id") or new_id("call_"), "type": "function",
            "function": {"name": fn.get("name", ""),
                         "arguments": args if isinstance(args, str)
                         else json.dumps(args, ensure_ascii=False)},
        }
        if with_index:
            item = {"index": i, **item}
        out.append(item)
    return out


def logprobs_to_openai(entries: Any) -> dict[str, Any] | None:
    """Ollama's ``logprobs`` list -> OpenAI's ``{"content": [...]}``; None when absent."""
    if not entries:
        return None
    content = []
    for e in entries:
        token = e.get("token", "")
        item = {"token": token, "logprob": e.get("logprob", 0.0),
                "bytes": e.get("bytes") or list(token.encode("utf-8")),
                "top_logprobs": [
                    {"token": t.get("token", ""), "logprob": t.get("logprob", 0.0),
                     "bytes": t.get("bytes") or list(t.get("token", "").encode("utf-8"))}
                    for t in e.get("top_logprobs") or []]}
        content.append(item)
    return {"content": content}


def _finish(native: Mapping[str, Any], had_tool_calls: bool) -> str:
    reason = native.get("done_reason") or "stop"
    if reason == "stop" and had_tool_calls:
        return "tool_calls"
    return "length" if reason == "length" else "stop"


def chat_completion(natives: Sequence[Mapping[str, Any]], *, model: str,
                    id: str | None = None, created: int | None = None) -> dict[str, Any]:
    """Final ``/api/chat`` responses (one per choice) -> a ``chat.completion`` object."""
    choices = []
    for i, native in enumerate(natives):
        msg = native.get("message") or {}
        calls = msg.get("tool_calls") or []
        message: dict[str, Any] = {"role": "assistant", "content": msg.get("content", "")}
        if msg.get("thinking"):
            message["reasoning"] = msg["thinking"]
        if calls:
            message["tool_calls"] = tool_calls_to_openai(calls)
        choices.append({"index": i, "message": message,
                        "logprobs": logprobs_to_openai(native.get("logprobs")),
                        "finish_reason": _finish(native, bool(calls))})
    return {"id": id or new_id("chatcmpl-"), "object": "chat.completion",
            "created": created if created is not None else int(time.time()), "model": model,
            "system_fingerprint": FINGERPRINT, "choices": choices,
            "usage": _native_usage(natives)}


def text_completion(natives: Sequence[Mapping[str, Any]], *, model: str,
                    id: str | None = None, created: int | None = None) -> dict[str, Any]:
    """Final ``/api/generate`` responses (one per choice) -> a ``text_completion`` object."""
    choices = [{"index": i, "text": n.get("response", ""),
                "logprobs": logprobs_to_openai(n.get("logprobs")),
                "finish_reason": _finish(n, False)} for i, n in enumerate(natives)]
    return {"id": id or new_id("cmpl-"), "object": "text_completion",
            "created": created if created is not None else int(time.time()), "model": model,
            "system_fingerprint": FINGERPRINT, "choices": choices,
            "usage": _native_usage(natives)}


class _Stream:
    object_name = ""
    id_prefix = ""

    def __init__(self, model: str, *, id: str | None = None, created: int | None = None,
                 include_usage: bool = False, index: int = 0) -> None:
        self.model = model
        self.id = id or new_id(self.id_prefix)
        self.created = created if created is not None else int(time.time())
        self.include_usage = include_usage
        self.index = index
        self.done = False

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": self.object_name, "created": self.created,
                "model": self.model, "system_fingerprint": FINGERPRINT, "choices": choices}

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {**self._chunk([]), "usage": usage(prompt_tokens, completion_tokens)}

    def _tail(self, native: Mapping[str, Any], finish: dict[str, Any]) -> list[dict[str, Any]]:
        self.done = True
        out = [self._chunk([finish])]
        if self.include_usage:
            u = _native_usage([native])
            out.append(self.usage_chunk(u["prompt_tokens"], u["completion_tokens"]))
        return out


class ChatStream(_Stream):
    """Turns the ``/api/chat`` stream of one choice into ``chat.completion.chunk`` objects."""

    object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl-"

    def __init__(self, model: str, **kw: Any) -> None:
        super().__init__(model, **kw)
        self._sent_role = False
        self._tool_calls = 0

    def feed(self, native: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Chunks for one native stream object (a mid-stream ``error`` becomes an error body)."""
        if "error" in native:
            return [error_body(500, str(native["error"]))]
        msg = native.get("message") or {}
        delta: dict[str, Any] = {}
        if not self._sent_role:
            delta["role"] = "assistant"
        if msg.get("content") or (not self._sent_role and not native.get("done")):
            delta["content"] = msg.get("content", "")
        if msg.get("thinking"):
            delta["reasoning"] = msg["thinking"]
        calls = msg.get("tool_calls") or []
        if calls:
            delta["tool_calls"] = tool_calls_to_openai(calls, start=self._tool_calls,
                                                       with_index=True)
            self._tool_calls += len(calls)
        out = []
        if delta:
            self._sent_role = True
            out.append(self._chunk([{"index": self.index, "delta": delta,
                                     "logprobs": logprobs_to_openai(native.get("logprobs")),
                                     "finish_reason": None}]))
        if native.get("done"):
            out += self._tail(native, {"index": self.index, "delta": {}, "logprobs": None,
                                       "finish_reason": _finish(native, self._tool_calls > 0)})
        return out


class CompletionStream(_Stream):
    """Turns the ``/api/generate`` stream of one choice into ``text_completion`` chunks."""

    object_name = "text_completion"
    id_prefix = "cmpl-"

    def feed(self, native: Mapping[str, Any]) -> list[dict[str, Any]]:
        if "error" in native:
            return [error_body(500, str(native["error"]))]
        out = []
        if native.get("response"):
            out.append(self._chunk([{"index": self.index, "text": native["response"],
                                     "logprobs": logprobs_to_openai(native.get("logprobs")),
                                     "finish_reason": None}]))
        if native.get("done"):
            out += self._tail(native, {"index": self.index, "text": "", "logprobs": None,
                                       "finish_reason": _finish(native, False)})
        return out
