"""Calls written as JSON after an opening marker, with an optional close.

The shape shared by Granite (``granite.py``), Command-R7B (``command_r.py``),
Nemotron Nano v2 (``<TOOLCALL>[..]</TOOLCALL>``), Apriel (``<tool_calls>[..]
</tool_calls>``) and many a template-derived format (``derive.py``): after the
opening markup, one JSON array of calls, one call object, or (``many``) several
objects one after another; each names the keys that hold a call's name,
arguments and id, or (``name_as_key``, Apertus) is ``{"<name>": {arguments}}``.
The opening and closing markup are :class:`~localllm.toolcalls.tagged.Piece` s:
whitespace in them is lenient.  Owns :class:`JsonAfterMarker` and :class:`JsonShape`,
the description of such a format that a derived one is (and the grammar writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from localllm.toolcalls.base import (
    Attempt,
    RawCall,
    Syntax,
    ToolSet,
    json_calls,
    read_json,
    skip_ws,
)
from localllm.toolcalls.tagged import Piece, marker_like


class JsonAfterMarker(Syntax):
    def __init__(
        self,
        open_tag: str,
        close_tag: str = "",
        *,
        name: str = "name",
        args: tuple[str, ...] = ("arguments",),
        ident: str = "id",
        strip: tuple[str, ...] = (),
        many: bool = False,
        name_as_key: bool = False,
    ) -> None:
        self.open, self.close = Piece(open_tag), Piece(close_tag)
        self.keys = (name, args, ident)
        self.many, self.name_as_key = many, name_as_key
        self.starts = (self.open.first,)
        tokens = [t for t in (*self.open.tokens, *self.close.tokens) if marker_like(t)]
        self.strip = tuple(dict.fromkeys([*tokens, *strip]))
        self.markers = self.strip

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        opened = self.open.match(text, 0, final)
        if opened is None:
            return None
        if not isinstance(opened, tuple):
            return Attempt(len(self.open.first), None, "not the call markup")
        at, data = opened[0], list[Any]()
        while True:
            got = read_json(text, at, final, self.scan)
            if got is None:
                return None
            if isinstance(got, Attempt):
                if data:
                    break  # the values end here
                return got
            data.append(got[0])
            at = got[1]
            if not self.many:
                break
            nxt = skip_ws(text, at)
            if nxt < len(text) and text[nxt] == ",":
                at = nxt + 1
            elif nxt >= len(text) and not final:
                return None  # another value may follow
        end = at
        if not self.close.empty:
            close = self.close.match(text, at, final)
            if close is None:
                return None
            end = close[0] if isinstance(close, tuple) else end
        calls = self._calls(data)
        return Attempt(end, calls, "" if calls else "JSON is not a list of calls")

    def _calls(self, data: list[Any]) -> list[RawCall] | None:
        items = [i for d in data for i in (d if isinstance(d, list) else [d])]
        if not self.name_as_key:
            name, args, ident = self.keys
            return json_calls(items, name=name, args=args, ident=ident)
        calls = []
        for item in items:
            if not isinstance(item, dict) or len(item) != 1:
                return None
            ((fn, arguments),) = item.items()
            calls.append(RawCall(fn, arguments))
        return calls or None


@dataclass(frozen=True)
class JsonShape:
    """A JSON call format: its markup and the keys of a call object."""

    open: str
    close: str = ""
    name: str = "name"
    args: str = "arguments"
    ident: str = ""
    many: bool = False
    name_as_key: bool = False
    listed: bool = False  # the calls are one JSON array

    def syntax(self, strip: tuple[str, ...] = ()) -> JsonAfterMarker:
        return JsonAfterMarker(
            self.open,
            self.close,
            name=self.name,
            args=(self.args,),
            ident=self.ident or "id",
            many=self.many,
            name_as_key=self.name_as_key,
            strip=strip,
        )
