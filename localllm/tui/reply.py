"""One streamed reply, accumulated from ``/api/chat`` chunks (no Textual here).

The streaming worker feeds every chunk in as it arrives; the message widget
reads ``content``/``thinking`` on its own timer, so the screen is redrawn at a
bounded rate however fast tokens come (see ``widgets/message.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from localllm.api.wire import ChatChunk, ToolCall
from localllm.tui.format import reply_stats
from localllm.tui.sessions import ReplyStats


class Reply:
    """Text, thinking and tool calls of one assistant reply, plus its timing."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.first_token: float | None = None
        self.content = ""
        self.thinking = ""
        self.tool_calls: list[ToolCall] = []
        self.final: ChatChunk | None = None  # the last chunk: done_reason and the timings

    def feed(self, chunk: ChatChunk) -> None:
        # .get throughout: a chunk from another server may leave out what ours always sends.
        message = chunk.get("message") or {}
        content = message.get("content") or ""
        thinking = message.get("thinking") or ""
        calls = message.get("tool_calls") or []
        if content or thinking or calls:
            if self.first_token is None:
                self.first_token = self.clock()
            self.content += content
            self.thinking += thinking
            self.tool_calls.extend(calls)
        if chunk.get("done"):
            self.final = chunk

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    def stats(self) -> ReplyStats:
        """What is saved with the message and shown in the status line."""
        if self.final is None:
            return {"ttft": self.ttft}
        return reply_stats(self.final, self.ttft)
