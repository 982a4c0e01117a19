"""DeepSeek R1 / V3 and V3.1 tool calls, inside ``<｜tool▁calls▁begin｜>..<｜tool▁calls▁end｜>``.

R1 (and V3-0324)::

    <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜>

V3.1: ``<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>``.
Both forms are read whichever template was detected.  Reasoning is ``<think>``.
"""

from __future__ import annotations

from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Step,
    Syntax,
    ToolSet,
    calls_region,
    expect,
    read_json,
)

CALLS, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
FENCE, FENCE_END = "```json", "```"


class DeepSeek(Syntax):
    starts = (CALLS, CALL)
    strip = (CALLS, CALLS_END, CALL, CALL_END, SEP)
    markers = strip

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        start = len(CALLS) if text.startswith(CALLS) else 0
        return calls_region(
            text,
            start,
            final,
            lambda at: self._call(text, at, final),
            since=start,
            close=CALLS_END,
            broken_close=CALLS_END if start else CALL_END,
            closed=bool(start),
            why="no call inside the call list",
        )

    def _call(self, text: str, at: int, final: bool) -> Step:
        begin = expect(text, at, CALL)
        if begin is None or begin == -1:
            return -1 if final else begin
        sep = text.find(SEP, begin)
        if sep < 0:
            return None if len(text) - begin <= MAX_NAME else "no <｜tool▁sep｜>"
        head, at = text[begin:sep].strip(), sep + len(SEP)
        if head == "function":  # R1: the name on its own line, then fenced JSON
            line_end = text.find("\n", at)
            if line_end < 0:
                return None if len(text) - at <= MAX_NAME else "no function name"
            name, at = text[at:line_end].strip(), line_end
            fence = expect(text, at, FENCE)
            if fence is None:
                return None
            at = fence if fence > 0 else at
        else:
            name = head
        got = read_json(text, at, final, self.scan)
        if got is None:
            return None
        if isinstance(got, Attempt):
            return got.why
        args, at = got
        fence_end = expect(text, at, FENCE_END)
        if fence_end is None:
            return None
        at = fence_end if fence_end > 0 else at
        end = expect(text, at, CALL_END)
        if end is None and final:
            end = len(text)
        if end is None or end == -1:
            return None if end is None else "text after the arguments"
        if not name or len(name) > MAX_NAME or "\n" in name:
            return "no function name"
        return RawCall(name, args), end
