"""Shape generated pieces into Ollama's response fields: content, thinking, tool calls, logprobs.

``OutputShaper`` sits between the runner's pieces and the response chunks.  It
splits ``<think>`` blocks into ``thinking`` when thinking is on, turns tool-call
markup into ``tool_calls`` objects when the request carried tools, and formats
logprobs.  ``grammar_for`` turns a request's ``format`` into a GBNF grammar.
"""

from __future__ import annotations

from typing import Any

from localllm.engine.types import Piece
from localllm.errors import InvalidRequest
from localllm.grammar.json_schema import format_to_grammar
from localllm.inference import Target
from localllm.template.thinking import ThinkingSplitter
from localllm.template.tools import ToolCallParser


def grammar_for(fmt: str | dict[str, Any] | None) -> str | None:
    """``"json"`` or a JSON Schema → GBNF; empty → none; anything else → 400."""
    if fmt is None or fmt == "":
        return None
    return format_to_grammar(fmt)


def think_flag(value: bool | str | None, target: Target) -> bool | None:
    """Ollama's ``think``: bool or a level (``low|medium|high|max``, meaning on)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if value in ("low", "medium", "high", "max"):
        return True
    raise InvalidRequest(f'invalid think value "{value}": use true, false, low, medium or high')


class OutputShaper:
    """Turns a stream of pieces into response parts (see the module docstring)."""

    def __init__(self, target: Target, *, think: bool | None,
                 tools: list[dict[str, Any]] | None, logprobs: bool) -> None:
        template = target.info.chat_template or ""
        self._thinking = ThinkingSplitter(template) if think else None
        self._tools = ToolCallParser.for_template(template) if tools else None
        self._logprobs = logprobs
        self.tool_calls_seen = False

    def feed(self, piece: Piece) -> dict[str, Any]:
        parts: dict[str, Any] = {}
        text = piece.text
        if self._logprobs and piece.logprob is not None:
            entry: dict[str, Any] = {"token": piece.text, "logprob": piece.logprob}
            if piece.top_logprobs:
                entry["top_logprobs"] = [{"token": t, "logprob": lp}
                                         for t, lp in piece.top_logprobs]
            parts["logprobs"] = [entry]
        return self._split(text, parts, final=False)

    def finish(self) -> dict[str, Any]:
        return self._split("", {}, final=True)

    def _split(self, text: str, parts: dict[str, Any], *, final: bool) -> dict[str, Any]:
        content = text
        if self._thinking is not None:
            thinking, content = (self._thinking.finish() if final
                                 else self._thinking.feed(text))
            if thinking:
                parts["thinking"] = thinking
        if self._tools is not None:
            content, calls = (self._tools.finish(content) if final
                              else self._tools.feed(content))
            if calls:
                self.tool_calls_seen = True
                parts["tool_calls"] = [{"function": {"index": c.index, "name": c.name,
                                                     "arguments": c.arguments}}
                                       for c in calls]
        if content:
            parts["content"] = content
        return parts if (parts or final) else {}
