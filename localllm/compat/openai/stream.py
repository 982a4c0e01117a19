"""Native chunk streams -> OpenAI's server-sent events: ``chat.completion.chunk`` and
``text_completion`` chunks, ``n`` choices interleaved.

:class:`ChatStream` and :class:`CompletionStream` are fed ``(choice index,
native chunk)`` pairs in the order the choices produced them and return SSE
frames (the :class:`~localllm.compat.frames.FrameStream` interface).  All
chunks share one ``id`` and one ``created``; a choice's first chunk carries
``delta.role``, its last has an empty delta and the ``finish_reason``.  With
``include_usage`` a chunk with ``choices: []`` and the usage of every choice
comes last, then ``data: [DONE]``.  A failure after the first event is an
``{"error": {...}}`` event, and the stream ends without ``[DONE]``.
"""

from __future__ import annotations

import time
from typing import Any, Generic, TypeVar

from localllm.api.wire import ChatChunk, GenerateChunk, StreamError
from localllm.compat.frames import new_id, sse
from localllm.compat.openai.errors import error_body, error_from_exception
from localllm.compat.openai.response import (
    FINGERPRINT,
    finish_reason,
    logprobs_to_openai,
    tool_calls_to_openai,
    usage,
)
from localllm.compat.openai.types import Chunk, Delta, DeltaChoice, TextChoice

SSE_DONE = "data: [DONE]\n\n"
C = TypeVar("C", ChatChunk, GenerateChunk)


class _Stream(Generic[C]):
    object_name = ""
    id_prefix = ""

    def __init__(
        self,
        model: str,
        *,
        n: int = 1,
        include_usage: bool = False,
        id: str | None = None,
        created: int | None = None,
    ) -> None:
        self.model = model
        self.id = id or new_id(self.id_prefix)
        self.created = created if created is not None else int(time.time())
        self.include_usage = include_usage
        self._finished = [False] * n
        self._prompt = 0  # the prompt is the same for every choice: counted once
        self._cached = 0
        self._completion = 0

    @property
    def done(self) -> bool:
        """Whether every choice has finished."""
        return all(self._finished)

    def _chunk(self, choices: list[DeltaChoice | TextChoice]) -> Chunk:
        return {
            "id": self.id,
            "object": self.object_name,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": choices,
        }

    def usage_chunk(
        self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
    ) -> Chunk:
        chunk = self._chunk([])
        chunk["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return chunk

    def _choice(self, index: int, native: C) -> list[Chunk]:
        raise NotImplementedError

    def start(self) -> list[str]:
        return []

    def feed(self, item: tuple[int, C | StreamError]) -> list[str]:
        """Frames for one native chunk of choice ``index`` (a mid-stream ``error`` chunk
        becomes an error event)."""
        index, native = item
        if "error" in native:
            return [sse(error_body(500, str(native["error"])))]
        frames = [sse(chunk) for chunk in self._choice(index, native)]
        if native.get("done"):
            self._finished[index] = True
            if not self._prompt:
                self._prompt = int(native.get("prompt_eval_count") or 0)
                self._cached = int(native.get("prompt_cached_count") or 0)
            self._completion += int(native.get("eval_count") or 0)
        return frames

    def end(self) -> list[str]:
        usage_frame: list[str] = (
            [sse(self.usage_chunk(self._prompt, self._completion, self._cached))]
            if self.include_usage
            else []
        )
        return [*usage_frame, SSE_DONE]

    def fail(self, exc: BaseException) -> list[str]:
        return [sse(error_from_exception(exc)[1])]


class ChatStream(_Stream[ChatChunk]):
    """The ``/api/chat`` streams of ``n`` choices as ``chat.completion.chunk`` events."""

    object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl-"

    def __init__(self, model: str, *, n: int = 1, **kw: Any) -> None:
        super().__init__(model, n=n, **kw)
        self._sent_role = [False] * n
        self._tool_calls = [0] * n  # calls sent so far: the next call's index

    def _choice(self, index: int, native: ChatChunk) -> list[Chunk]:
        msg = native.get("message") or {}
        delta: Delta = {}
        if not self._sent_role[index]:
            delta["role"] = "assistant"
        if msg.get("content") or (not self._sent_role[index] and not native.get("done")):
            delta["content"] = msg.get("content", "")
        if msg.get("thinking"):
            delta["reasoning"] = msg["thinking"]
        calls = msg.get("tool_calls") or []
        if calls:
            delta["tool_calls"] = tool_calls_to_openai(
                calls, start=self._tool_calls[index], with_index=True
            )
            self._tool_calls[index] += len(calls)
        out: list[Chunk] = []
        if delta:
            self._sent_role[index] = True
            out.append(
                self._chunk(
                    [
                        {
                            "index": index,
                            "delta": delta,
                            "logprobs": logprobs_to_openai(native.get("logprobs")),
                            "finish_reason": None,
                        }
                    ]
                )
            )
        if native.get("done"):
            reason = finish_reason(native, self._tool_calls[index] > 0)
            out.append(
                self._chunk(
                    [{"index": index, "delta": {}, "logprobs": None, "finish_reason": reason}]
                )
            )
        return out


class CompletionStream(_Stream[GenerateChunk]):
    """The ``/api/generate`` streams of ``n`` choices as ``text_completion`` events."""

    object_name = "text_completion"
    id_prefix = "cmpl-"

    def _choice(self, index: int, native: GenerateChunk) -> list[Chunk]:
        out: list[Chunk] = []
        if native.get("response"):
            out.append(
                self._chunk(
                    [
                        {
                            "index": index,
                            "text": native["response"],
                            "logprobs": logprobs_to_openai(native.get("logprobs")),
                            "finish_reason": None,
                        }
                    ]
                )
            )
        if native.get("done"):
            out.append(
                self._chunk(
                    [
                        {
                            "index": index,
                            "text": "",
                            "logprobs": None,
                            "finish_reason": finish_reason(native, False),
                        }
                    ]
                )
            )
        return out
