"""Calls written as one JSON array (or object) after an opening marker, with an optional close.

The shape shared by Granite (``granite.py``) and Command-R7B (``command_r.py``);
each names its marker and the keys that hold a call's name, arguments and id.
"""

from __future__ import annotations

from localllm.toolcalls.base import Attempt, Syntax, ToolSet, expect, json_calls, read_json


class JsonAfterMarker(Syntax):
    def __init__(self, open_tag: str, close_tag: str = "", *, name: str = "name",
                 args: tuple[str, ...] = ("arguments",), ident: str = "id",
                 strip: tuple[str, ...] = ()) -> None:
        self.open, self.close = open_tag, close_tag
        self.keys = (name, args, ident)
        self.starts = (open_tag,)
        self.strip = tuple(t for t in (open_tag, close_tag, *strip) if t)
        self.markers = self.strip

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        got = read_json(text, len(self.open), final)
        if got is None or isinstance(got, Attempt):
            return got
        data, end = got
        if self.close:
            close = expect(text, end, self.close)
            if close is None and not final:
                return None
            end = close if close is not None and close > 0 else end
        name, args, ident = self.keys
        calls = json_calls(data, name=name, args=args, ident=ident)
        return Attempt(end, calls, "" if calls else "JSON is not a list of calls")
