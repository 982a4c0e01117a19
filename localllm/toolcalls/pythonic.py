"""LFM2 / LFM2.5 tool calls: a Python list of calls between ``<|tool_call_start|>`` and
``<|tool_call_end|>``.

::

    <|tool_call_start|>[get_time(city="Paris"), toggle(enabled=True)]<|tool_call_end|>

Arguments are keyword arguments with Python literals (``True``, ``None``,
single- or double-quoted strings with escapes, lists, dicts); JSON's ``true``,
``false`` and ``null`` are accepted too, as models mix them.  Names may be
dotted (``Calendar.create_event``).  The list is read with :mod:`ast` and only
literals are accepted: nothing is ever evaluated.  LFM2.5's reasoning is
``<think>``.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import Attempt, RawCall, Syntax, ToolSet, expect, skip_ws, to_close
from localllm.toolcalls.jsonscan import JsonScan, no_surrogates, scan_brackets

START, END = "<|tool_call_start|>", "<|tool_call_end|>"
_NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
_MAX_LEN = 1 << 20


# A Python string literal (its close quote in group 1 or 2: absent while the text ends
# inside it) or a bracket, walked by the regex engine (see jsonscan.json_end).
_SCAN = re.compile(r""""[^"\\]*(?:\\.[^"\\]*)*(")?|'[^'\\]*(?:\\.[^'\\]*)*(')?|[][(){}]""", re.S)


def list_end(text: str, at: int, scan: JsonScan | None = None) -> int | None:
    """End of the Python list opening at ``text[at]`` (strings and nesting respected);
    None while it is incomplete.  ``scan``: as for :func:`~localllm.toolcalls.jsonscan.json_end`."""
    return scan_brackets(text, at, _SCAN, "([{", scan)


def read_calls(source: str) -> list[RawCall] | str:
    """The calls of a Python list of calls; a reason when it is anything else."""
    if len(source) > _MAX_LEN:
        return "the call list is too long"
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "not a Python list of calls"
    if not isinstance(tree.body, ast.List):
        return "not a list"
    calls = []
    for node in tree.body.elts:
        if not isinstance(node, ast.Call) or node.args:
            return "not a call with keyword arguments"
        name = _dotted(node.func)
        if name is None:
            return "not a function name"
        args: JSONObject = {}
        try:
            for kw in node.keywords:
                if kw.arg is None:
                    return "** arguments"
                args[kw.arg] = _literal(kw.value)
        except (ValueError, RecursionError):
            return f"arguments of {name!r} are not literals"
        calls.append(RawCall(name, args))
    return calls or "an empty list"


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return no_surrogates(node.value)  # Python keeps "\\ud83d\\ude00" as two halves
        if node.value is None or isinstance(node.value, int | float | bool):
            return node.value
        raise ValueError("not a literal")
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values, strict=True):
            k = _literal(key) if key is not None else None
            if not isinstance(k, str | int | float | bool) and k is not None:
                raise ValueError("not a literal key")
            out[k if isinstance(k, str) else str(k)] = _literal(value)
        return out
    raise ValueError("not a literal")


class Pythonic(Syntax):
    starts = (START,)
    strip = (START, END)
    markers = (START, END)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        at = skip_ws(text, len(START))
        if at >= len(text):
            return Attempt(len(text), None, "no call list") if final else None
        if text[at] != "[":
            return to_close(text, len(START), END, final, "no call list")
        end = list_end(text, at, self.scan)
        if end is None:
            return Attempt(len(text), None, "unterminated call list") if final else None
        calls = read_calls(text[at:end])
        close = expect(text, end, END)
        if close is None and not final:
            return None
        stop = close if close is not None and close > 0 else end
        if isinstance(calls, str):
            return Attempt(stop, None, calls)
        return Attempt(stop, calls)
