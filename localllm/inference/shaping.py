"""Shape generated pieces into Ollama's response fields: content, thinking, tool calls, logprobs.

``OutputShaper`` sits between the runner's pieces and the response chunks.  It
splits ``<think>`` blocks into ``thinking`` when thinking is on, turns tool-call
markup into ``tool_calls`` objects when the request carried tools, and formats
logprobs.  ``grammar_for`` turns a request's ``format`` into a GBNF grammar.
"""

from __future__ import annotations

from typing import Any

from localllm.errors import InvalidRequest
from localllm.grammar.json_schema import grammar_for_format
from localllm.inference.service import Target
from localllm.runner.messages import Piece
from localllm.template.thinking import (
    ThinkingSplitter,
    detect_thinking_tags,
    prompt_opens_thinking,
)
from localllm.template.tools import Family, ToolCallParser


def grammar_for(fmt: str | dict[str, Any] | None) -> str | None:
    """``"json"`` or a JSON Schema → GBNF; empty → none; anything else → 400."""
    if fmt is None or fmt == "":
        return None
    return grammar_for_format(fmt)


def think_flag(value: bool | str | None) -> bool | None:
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
                 tools: list[dict[str, Any]] | None, logprobs: bool, prompt: str = "",
                 tool_family: Family | None = None) -> None:
        template = target.info.chat_template or ""
        self._thinking: ThinkingSplitter | None = None
        tags = detect_thinking_tags(template) or ("<think>", "</think>")
        opened = prompt_opens_thinking(prompt, *tags)
        # Thinking is split when asked for, and also when the template itself opened a
        # block in the prompt (the model will close it whatever the request said).
        if think or opened:
            self._thinking = ThinkingSplitter(*tags, opened=opened)
        self._hide_thinking = think is False
        self._tools: ToolCallParser | None = None
        if tools:
            # A forced tool call is written in ``tool_family``'s markup (see grammar/tools.py).
            self._tools = (ToolCallParser(tool_family) if tool_family
                           else ToolCallParser.for_template(template))
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
            if thinking and not self._hide_thinking:
                parts["thinking"] = thinking
        if self._tools is not None:
            result = self._tools.feed(content)
            if final:
                tail = self._tools.finish()
                result.content += tail.content
                result.calls.extend(tail.calls)
            content = result.content
            if result.calls:
                self.tool_calls_seen = True
                parts["tool_calls"] = [c.to_ollama() for c in result.calls]
        if content:
            parts["content"] = content
        return parts if (parts or final) else {}
