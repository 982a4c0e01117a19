"""Kimi K2 tool calls: a section of calls, each with an id ``functions.<name>:<n>``.

::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The id is kept as the call's id (Kimi's templates send it back with the result).
Kimi K2 Thinking reasons in ``<think>``.
"""

from __future__ import annotations

from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Syntax,
    ToolSet,
    calls_then_close,
    expect,
    read_json,
    to_close,
)

SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL, ARGS, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def name_of(ident: str) -> str:
    """``functions.get_weather:0`` → ``get_weather``."""
    name = ident.removeprefix("functions.")
    head, colon, tail = name.rpartition(":")
    return head if colon and tail.isdigit() else name


class Kimi(Syntax):
    starts = (SECTION, CALL)
    strip = (SECTION, SECTION_END, CALL, ARGS, CALL_END)
    markers = strip

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        start = len(SECTION) if text.startswith(SECTION) else 0
        at, calls = start, []
        while True:
            begin = expect(text, at, CALL)
            if begin is None and not final:
                return None
            if begin is None or begin == -1:
                break  # no further call in the section
            args = text.find(ARGS, begin)
            if args < 0 or args - begin > MAX_NAME:
                if args < 0 and len(text) - begin <= MAX_NAME and not final:
                    return None
                return to_close(
                    text, start, SECTION_END if start else CALL_END, final, "no arguments marker"
                )
            ident = text[begin:args].strip()
            got = read_json(text, args + len(ARGS), final, self.scan)
            if got is None or isinstance(got, Attempt):
                return got
            data, at = got
            end = expect(text, at, CALL_END)
            if end is None and not final:
                return None
            at = end if end is not None and end > 0 else at
            calls.append(RawCall(name_of(ident), data, ident or None))
        return calls_then_close(
            text,
            (calls, at),
            final,
            since=start,
            close=SECTION_END,
            closed=bool(start),
            why="no call in the section",
        )
