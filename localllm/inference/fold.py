"""A stream of Ollama-shaped chunks folded into the one object ``stream: false`` returns.

The last chunk (``done: true``, the metrics) is the result, with the text,
thinking, tool calls and logprobs of every chunk before it gathered into it.
:func:`fold` folds a stream as it comes (nothing but the texts is kept);
:func:`fold_chunks` a run already collected (``n`` choices run at once).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TypeVar, cast

from localllm.api.wire import ChatChunk, Chunk, GenerateChunk, Logprob, Message, ToolCall

C = TypeVar("C", bound=Chunk)


class _Fold:
    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.last: Chunk | None = None
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolCall] = []
        self.logprobs: list[Logprob] = []

    def add(self, chunk: Chunk) -> None:
        if "message" in chunk:  # /api/chat's
            body: Message | GenerateChunk = chunk["message"]
            self.content.append(chunk["message"].get("content") or "")
        else:
            body = chunk
            self.content.append(chunk.get("response") or "")
        self.thinking.append(body.get("thinking") or "")
        if "tool_calls" in body:
            self.calls.extend(body["tool_calls"] or [])
        self.logprobs.extend(chunk.get("logprobs") or [])
        self.last = chunk

    def result(self) -> Chunk:
        # No chunk at all (a run always ends with one): the texts on an empty object.
        folded = self.last if self.last is not None else cast(Chunk, {})
        content, thinking = "".join(self.content), "".join(self.thinking)
        if self.chat:
            chat = cast(ChatChunk, folded)
            message: Message = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if self.calls:
                message["tool_calls"] = self.calls
            chat["message"] = message
        else:
            generated = cast(GenerateChunk, folded)
            generated["response"] = content
            if thinking:
                generated["thinking"] = thinking
        if self.logprobs:
            folded["logprobs"] = self.logprobs
        return folded


async def fold(chunks: AsyncIterator[C], chat: bool) -> C:
    """A stream of ``/api/chat`` (``chat``) or ``/api/generate`` chunks, folded."""
    into = _Fold(chat)
    async for chunk in chunks:
        into.add(chunk)
    return cast(C, into.result())  # the last chunk, of the stream's own kind


def fold_chunks(chunks: Iterable[C], chat: bool) -> C:
    """Collected chunks, folded as :func:`fold` folds a stream."""
    into = _Fold(chat)
    for chunk in chunks:
        into.add(chunk)
    return cast(C, into.result())
