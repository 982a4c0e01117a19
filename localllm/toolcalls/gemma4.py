"""Gemma 4 tool calls: ``<|tool_call>call:NAME{key:value,..}<tool_call|>``, one block per call.

The arguments are Gemma's own literal syntax, not JSON: keys are bare words,
strings sit between ``<|"|>`` markers (so they may hold quotes and braces),
numbers, ``true``, ``false`` and ``null`` are as in JSON, and lists ``[..]`` and
nested ``{..}`` nest::

    <|tool_call>call:set_config{config:{theme:<|"|>dark<|"|>,count:3}}<tool_call|>

Reasoning is a ``<|channel>thought`` .. ``<channel|>`` block (see ``thinking.py``);
a stray ``<channel|>`` after the answer is markup, removed.  Owns :class:`Gemma4`
and :func:`read_value`, the reader of Gemma's literals.
"""

from __future__ import annotations

from typing import Any

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Syntax,
    ToolSet,
    end_call,
    expect,
    skip_ws,
    to_close,
    unterminated,
)
from localllm.toolcalls.jsonscan import json_or_text

CALL, CALL_END, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
HEAD = "call:"
THINK = ("<|channel>thought", "<channel|>")
CHANNEL, CHANNEL_END = "<|channel>", "<channel|>"
_MAX_DEPTH = 64


class _Incomplete(Exception):
    """The text ends inside the value."""


def _skip(text: str, at: int) -> int:
    """Where the next thing starts after whitespace; the text must not end first."""
    at = skip_ws(text, at)
    if at >= len(text):
        raise _Incomplete
    return at


def read_value(text: str, at: int, depth: int = 0) -> tuple[Any, int]:
    """The Gemma literal at ``text[at:]`` (after whitespace) and where it ends.

    Raises :class:`_Incomplete` when the text ends inside it, ValueError when it is
    not a literal."""
    if depth > _MAX_DEPTH:
        raise ValueError("arguments nest too deeply")
    at = _skip(text, at)
    if text.startswith(QUOTE, at):
        end = text.find(QUOTE, at + len(QUOTE))
        if end < 0:
            raise _Incomplete
        return text[at + len(QUOTE) : end], end + len(QUOTE)
    if QUOTE.startswith(text[at:]):
        raise _Incomplete
    if text[at] == "{":
        return _object(text, at + 1, depth)
    if text[at] == "[":
        return _list(text, at + 1, depth)
    end = at
    while end < len(text) and text[end] not in ",}]" and not text.startswith(QUOTE, end):
        end += 1
    if end >= len(text):
        raise _Incomplete
    raw = text[at:end].strip()
    if not raw:
        raise ValueError("a value is missing")
    return json_or_text(raw), end


def _object(text: str, at: int, depth: int) -> tuple[JSONObject, int]:
    out: JSONObject = {}
    while True:
        at = _skip(text, at)
        if text[at] == "}":
            return out, at + 1
        colon = text.find(":", at)
        if colon < 0:
            if len(text) - at > MAX_NAME:
                raise ValueError("a key has no value")
            raise _Incomplete
        key = text[at:colon].strip()
        if key.startswith(QUOTE) and key.endswith(QUOTE) and len(key) >= 2 * len(QUOTE):
            key = key[len(QUOTE) : -len(QUOTE)]
        if not key or len(key) > MAX_NAME or any(c in key for c in "{}[],\n"):
            raise ValueError("not a key")
        out[key], at = read_value(text, colon + 1, depth + 1)
        at = _after_item(text, at, "}")


def _list(text: str, at: int, depth: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while True:
        at = _skip(text, at)
        if text[at] == "]":
            return out, at + 1
        value, at = read_value(text, at, depth + 1)
        out.append(value)
        at = _after_item(text, at, "]")


def _after_item(text: str, at: int, close: str) -> int:
    at = _skip(text, at)
    if text[at] == ",":
        return at + 1
    if text[at] == close:
        return at
    raise ValueError(f"expected ',' or '{close}'")


class Gemma4(Syntax):
    starts = (CALL,)
    strip = (CALL, CALL_END, QUOTE, THINK[0], CHANNEL, CHANNEL_END)
    markers = (CALL, CALL_END, QUOTE, CHANNEL, CHANNEL_END)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        head = expect(text, len(CALL), HEAD)
        if head is None and not final:
            return None
        if head is None or head < 0:
            return to_close(text, len(CALL), CALL_END, final, "no 'call:' after <|tool_call>")
        brace = text.find("{", head)
        if brace < 0:
            if len(text) - head > MAX_NAME or final:
                return to_close(text, head, CALL_END, final, "no arguments")
            return None
        name = text[head:brace].strip()
        if not name or len(name) > MAX_NAME or any(c in name for c in "\n<>"):
            return to_close(text, head, CALL_END, final, "no function name")
        try:
            args, end = read_value(text, brace)
        except _Incomplete:
            return unterminated(text, final)
        except (ValueError, RecursionError) as exc:
            return to_close(text, brace, CALL_END, final, f"arguments: {exc}")
        return end_call(
            text,
            end,
            CALL_END,
            final,
            RawCall(name, args),
            since=end,
            why="text after the arguments",
        )
