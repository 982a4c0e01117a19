"""Qwen3-Coder's XML tool calls (also Qwen3.5, Nemotron 3 Nano, StepFun, Seed-OSS).

::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Seed-OSS writes the same inside ``<seed:tool_call>``.  Values are text: one
newline right inside the parameter tags is formatting (Qwen3-Coder's; Seed-OSS writes
none, so there it is the value's); the tool's JSON schema
types the value (a string parameter keeps its text, others are read as JSON when
they parse).  Some models leave out the opening ``<tool_call>``, so
``<function=`` opens a call too.
"""

from __future__ import annotations

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import (
    Attempt,
    RawCall,
    Step,
    Syntax,
    ToolSet,
    call_name,
    calls_region,
    expect,
    typed_value,
)

FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAM, PARAM_END = "<parameter=", "</parameter>"


def _value(raw: str) -> str:
    raw = raw[1:] if raw.startswith("\n") else raw
    return raw[:-1] if raw.endswith("\n") else raw


class XmlCall(Syntax):
    def __init__(
        self, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>", *, padded: bool = True
    ) -> None:
        self.open, self.close = open_tag, close_tag
        # Qwen3-Coder writes a newline on each side of a value; Seed-OSS writes none, so
        # a newline there is the value's own.
        self.padded = padded
        self.starts = (open_tag, FUNCTION)
        self.strip = (open_tag, close_tag)
        self.markers = (open_tag, close_tag)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        start = len(self.open) if text.startswith(self.open) else 0
        return calls_region(
            text,
            start,
            final,
            lambda at: self._function(text, at, tools, final),
            since=start,
            close=self.close,
            broken_close=self.close if start else FUNCTION_END,
            closed=True,
            why="no <function=..> in the call",
        )

    def _function(self, text: str, at: int, tools: ToolSet | None, final: bool) -> Step:
        """One ``<function=..>`` block from ``at`` (see :data:`~localllm.toolcalls.base.Step`)."""
        named = call_name(text, at, FUNCTION, ">", final)
        if not isinstance(named, tuple):
            return named
        name, at = named
        args: JSONObject = {}
        while True:
            param = expect(text, at, PARAM)
            if param is None:
                return None
            if param == -1:
                break
            pgt = text.find(">", param)
            end = text.find(PARAM_END, pgt + 1) if pgt >= 0 else -1
            if end < 0:
                return None
            key = text[param:pgt].strip()
            raw = text[pgt + 1 : end]
            args[key] = typed_value(tools, name, key, _value(raw) if self.padded else raw)
            at = end + len(PARAM_END)
        close = expect(text, at, FUNCTION_END)
        if close is None:
            return None
        if close == -1:
            return f"text inside <function={name}> is not a parameter"
        return RawCall(name, args), close
