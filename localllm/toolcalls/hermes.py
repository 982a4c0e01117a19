"""Hermes / Qwen 2.5 tool calls: ``<tool_call>{"name": .., "arguments": {..}}</tool_call>``.

One block per call (a JSON array of calls inside one block is accepted too).  A
block whose JSON is cut off by the end of the stream still counts when the JSON
itself is complete (models stopped right before the close tag).  Also used for
templates that teach no format when a tool call is forced by a grammar.
"""

from __future__ import annotations

from localllm.toolcalls.base import (
    Attempt,
    Syntax,
    ToolSet,
    expect,
    json_calls,
    read_json,
    to_close,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class Hermes(Syntax):
    starts = (OPEN,)
    strip = (OPEN, CLOSE)
    markers = (OPEN, CLOSE)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        got = read_json(text, len(OPEN), final, self.scan)
        if got is None:
            return None
        if isinstance(got, Attempt):
            return to_close(text, len(OPEN), CLOSE, final, got.why)
        data, end = got
        close = expect(text, end, CLOSE)
        if close is None and not final:
            return None
        if close == -1:
            return to_close(text, len(OPEN), CLOSE, final, "text after the JSON")
        calls = json_calls(data)
        end = close if close is not None else len(text)
        return Attempt(end, calls, "" if calls else "JSON is not a call")
