"""A stream of Ollama-shaped chunks folded into the one object ``stream: false`` returns.

The last chunk (``done: true``, the metrics) is the result, with the text,
thinking, tool calls and logprobs of every chunk before it gathered into it.
:func:`fold` folds a stream as it comes (nothing but the texts is kept);
:func:`fold_chunks` a run already collected (``n`` choices run at once).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any


class _Fold:
    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.last: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = {"content": [], "thinking": []}
        self.calls: list[Any] = []
        self.logprobs: list[Any] = []

    def add(self, chunk: dict[str, Any]) -> None:
        body = chunk.get("message") if self.chat else chunk
        assert isinstance(body, dict)
        self.texts["content"].append(body.get("content" if self.chat else "response") or "")
        self.texts["thinking"].append(body.get("thinking") or "")
        self.calls.extend(body.get("tool_calls") or [])
        self.logprobs.extend(chunk.get("logprobs") or [])
        self.last = chunk

    def result(self) -> dict[str, Any]:
        folded, texts = self.last, self.texts
        if self.chat:
            message: dict[str, Any] = {"role": "assistant",
                                       "content": "".join(texts["content"])}
            if any(texts["thinking"]):
                message["thinking"] = "".join(texts["thinking"])
            if self.calls:
                message["tool_calls"] = self.calls
            folded["message"] = message
        else:
            folded["response"] = "".join(texts["content"])
            if any(texts["thinking"]):
                folded["thinking"] = "".join(texts["thinking"])
        if self.logprobs:
            folded["logprobs"] = self.logprobs
        return folded


async def fold(chunks: AsyncIterator[dict[str, Any]], chat: bool) -> dict[str, Any]:
    """A stream of ``/api/chat`` (``chat``) or ``/api/generate`` chunks, folded."""
    into = _Fold(chat)
    async for chunk in chunks:
        into.add(chunk)
    return into.result()


def fold_chunks(chunks: Iterable[dict[str, Any]], chat: bool) -> dict[str, Any]:
    """Collected chunks, folded as :func:`fold` folds a stream."""
    into = _Fold(chat)
    for chunk in chunks:
        into.add(chunk)
    return into.result()
