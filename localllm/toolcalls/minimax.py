"""MiniMax-M3 tool calls: XML whose every tag carries the namespace token ``]<]minimax[>[``.

::

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_time">]<]minimax[>[<city>Tokyo]<]minimax[>[</city>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

The argument's name is its tag.  An object argument nests one element per key,
an array one ``<item>`` per element; leaves are text typed by the tool's schema
(a parameter that may be a string keeps its text as written, nested markup
included).  Reasoning is ``<mm:think>``; a reply without reasoning opens with a
bare ``</mm:think>`` (see ``thinking.py``).  MiniMax-M2's plainer
``<minimax:tool_call>`` format is a :class:`~localllm.toolcalls.tagged.Shape`
(see ``shapes.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Step,
    Syntax,
    ToolSet,
    call_name,
    calls_region,
    skip_ws,
    typed_value,
)
from localllm.toolcalls.jsonscan import json_or_text

NS = "]<]minimax[>["
SECTION, SECTION_END = NS + "<tool_call>", NS + "</tool_call>"
INVOKE, INVOKE_END = NS + '<invoke name="', NS + "</invoke>"
THINK = ("<mm:think>", "</mm:think>")
_OPEN, _CLOSE = NS + "<", NS + "</"
_MAX_DEPTH = 32

Node = str | list[tuple[str, "Node"]]
Element = tuple[str, Node, int, int, int]  # tag, value, inner start, inner end, end


class MiniMaxM3(Syntax):
    starts = (SECTION, INVOKE)
    strip = (SECTION, SECTION_END, INVOKE_END, NS)
    markers = (NS, "<tool_call>", "</tool_call>", *THINK)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        section = text.startswith(SECTION)
        return calls_region(
            text,
            len(SECTION) if section else 0,
            final,
            lambda at: self._invoke(text, at, tools, final),
            since=1,
            close=SECTION_END,
            broken_close=SECTION_END if section else INVOKE_END,
            closed=section,
            why="no call in the section",
            many=section,
        )

    def _invoke(self, text: str, at: int, tools: ToolSet | None, final: bool) -> Step:
        named = call_name(text, at, INVOKE, '">', final)
        if not isinstance(named, tuple):
            return named
        name, at = named
        args: JSONObject = {}
        while True:
            at = skip_ws(text, at)
            if text.startswith(INVOKE_END, at):
                return RawCall(name, args), at + len(INVOKE_END)
            if INVOKE_END.startswith(text[at:]) and not final:
                return None
            got = _element(text, at, final, 0)
            if got is None or isinstance(got, str):
                return got
            key, node, inner, inner_end, at = got
            args[key] = _argument(tools, name, key, node, text[inner:inner_end])


def _element(text: str, at: int, final: bool, depth: int) -> Element | str | None:
    """The element at ``at``; a reason when there is none; None while incomplete."""
    if depth > _MAX_DEPTH:
        return "arguments nest too deeply"
    if not text.startswith(_OPEN, at) or text.startswith(_CLOSE, at):
        if _OPEN.startswith(text[at:]) and not final:
            return None
        return "text inside the call"
    gt = text.find(">", at + len(_OPEN))
    if gt < 0:
        return None if len(text) - at <= MAX_NAME and not final else "no argument name"
    tag = text[at + len(_OPEN) : gt]
    if not tag or len(tag) > MAX_NAME or any(c in tag for c in "<>/\n "):
        return "no argument name"
    inner, close = gt + 1, f"{_CLOSE}{tag}>"
    nxt = skip_ws(text, inner)
    if nxt >= len(text) or (_OPEN.startswith(text[nxt:]) and not final):
        return None if not final else "unterminated argument"
    if text.startswith(_OPEN, nxt) and not text.startswith(_CLOSE, nxt):
        children: list[tuple[str, Node]] = []
        at = nxt
        while True:
            at = skip_ws(text, at)
            if text.startswith(close, at):
                return tag, children, inner, at, at + len(close)
            if close.startswith(text[at:]) and not final:
                return None
            got = _element(text, at, final, depth + 1)
            if got is None or isinstance(got, str):
                return got
            children.append((got[0], got[1]))
            at = got[4]
    end = text.find(close, inner)
    if end < 0:
        return "unterminated argument" if final else None
    return tag, text[inner:end], inner, end, end + len(close)


def _argument(tools: ToolSet | None, name: str, key: str, node: Node, raw: str) -> Any:
    if isinstance(node, str):
        return typed_value(tools, name, key, node)
    props = tools.params.get(name, {}).get("properties") if tools is not None else None
    schema = props.get(key) if isinstance(props, Mapping) else None
    if _allows_string(schema):
        return raw  # a string parameter keeps its text, markup included
    return _tree(node)


def _tree(node: Node) -> Any:
    if isinstance(node, str):
        return json_or_text(node)
    if node and all(tag == "item" for tag, _ in node):
        return [_tree(child) for _, child in node]
    return {tag: _tree(child) for tag, child in node}


def _allows_string(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return True
    return any(
        _allows_string(s)
        for key in ("anyOf", "oneOf")
        for s in (schema.get(key) or [])
        if isinstance(schema.get(key), list)
    )
