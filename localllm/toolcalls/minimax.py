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

from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Syntax,
    ToolSet,
    expect,
    json_or_text,
    skip_ws,
    to_close,
    typed_value,
)

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
        at = len(SECTION) if text.startswith(SECTION) else 0
        section, calls = at > 0, []
        while True:
            got = self._invoke(text, at, tools, final)
            if got is None:
                return Attempt(len(text), None, "unterminated call") if final else None
            if isinstance(got, int):
                break
            if isinstance(got, str):
                return to_close(text, 1, SECTION_END if section else INVOKE_END, final, got)
            calls.append(got[0])
            at = got[1]
            if not section:
                break
        if not calls:
            return to_close(text, 1, SECTION_END, final, "no call in the section")
        if section:
            close = expect(text, at, SECTION_END)
            if close is None and not final:
                return None
            at = close if close is not None and close > 0 else at
        return Attempt(at, calls)

    def _invoke(self, text: str, at: int, tools: ToolSet | None, final: bool
                ) -> tuple[RawCall, int] | int | str | None:
        begin = expect(text, at, INVOKE)
        if begin is None or begin == -1:
            return -1 if final else begin
        quote = text.find('">', begin)
        if quote < 0:
            return None if len(text) - begin <= MAX_NAME else "no function name"
        name = text[begin:quote].strip()
        if not name or len(name) > MAX_NAME or "\n" in name:
            return "no function name"
        args: dict[str, Any] = {}
        at = quote + 2
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
    tag = text[at + len(_OPEN):gt]
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
    return any(_allows_string(s) for key in ("anyOf", "oneOf")
               for s in (schema.get(key) or []) if isinstance(schema.get(key), list))
