"""GLM 4.5+ tool calls (also Laguna, Spark, Ling 3): the name, then key/value pairs.

::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

GLM-4.7 writes the same without the newlines.  Values are text typed by the
tool's JSON schema, as in Qwen3-Coder's format (``xmlcall.py``).
"""

from __future__ import annotations

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Syntax,
    ToolSet,
    end_call,
    expect,
    to_close,
    typed_value,
    unterminated,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


class Glm(Syntax):
    starts = (OPEN,)
    # Ling 3 ends its turns with <|role_end|>: markup wherever it shows.
    strip = (OPEN, CLOSE, KEY, KEY_END, VALUE, VALUE_END, "<|role_end|>")
    markers = (OPEN, CLOSE, KEY, KEY_END, VALUE, VALUE_END)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        begin = len(OPEN)
        stops = [at for at in (text.find(KEY, begin), text.find(CLOSE, begin)) if at >= 0]
        if not stops:
            if len(text) - begin > MAX_NAME or final:
                return Attempt(len(text) if final else begin, None, "no function name")
            return None
        name = text[begin : min(stops)].strip()
        if not name or len(name) > MAX_NAME or "\n" in name or "{" in name:
            return to_close(text, begin, CLOSE, final, "no function name")
        args: JSONObject = {}
        at = min(stops)
        while True:
            key = expect(text, at, KEY)
            if key is None:
                return unterminated(text, final)
            if key == -1:
                break
            key_end = text.find(KEY_END, key)
            value = expect(text, key_end + len(KEY_END), VALUE) if key_end >= 0 else None
            value_end = text.find(VALUE_END, value) if value is not None and value > 0 else -1
            if value == -1:
                return to_close(text, begin, CLOSE, final, "<arg_key> without <arg_value>")
            if value is None or value_end < 0:
                return unterminated(text, final)
            name_of_key = text[key:key_end].strip()
            args[name_of_key] = typed_value(tools, name, name_of_key, text[value:value_end])
            at = value_end + len(VALUE_END)
        return end_call(
            text, at, CLOSE, final, RawCall(name, args), since=begin, why="text inside the call"
        )
