"""Shared helpers for the format tests: run a parser over pieces, and cut texts every way."""

from __future__ import annotations

from typing import Any

from localllm.toolcalls import ToolCall, format_named


def tool(name: str, /, **props: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


TOOLS = [
    tool("get_weather", location={"type": "string"}, unit={"type": "string"}),
    tool("special_function", arg1={"type": "integer"}),
    tool("special_function_with_opt", arg1={"type": "integer"}, arg2={"type": "integer"}),
    tool("a"),
    tool("b"),
    tool("f"),
    tool("noop"),
    tool("get_time", city={"type": "string"}),
    tool("python", code={"type": "string"}),
    tool("toggle", enabled={"type": "boolean"}),
    tool("set_config", config={"type": "object"}),
    tool("todo_list", todos={"type": "array", "items": {"type": "string"}}),
    tool("amount", orig={"type": "number"}),
    tool("empty_args"),
    tool("Calendar.create_event", title={"type": "string"}, participants={"type": "array"}),
    tool("magic_int", ref={"type": "integer"}, name={"type": "string"}),
]

Simple = tuple[str, dict[str, Any], int, "str | None"]


def run(
    fmt: str,
    pieces: list[str],
    tools: list[dict[str, Any]] | None = TOOLS,
    think: bool | None = None,
    prompt: str = "",
    template: str = "",
) -> tuple[str, str, list[ToolCall]]:
    parser = format_named(fmt, template).parser(tools, think, prompt)
    content, thinking, calls = "", "", []
    for piece in pieces:
        r = parser.feed(piece)
        content, thinking, calls = content + r.content, thinking + r.thinking, calls + r.calls
    r = parser.finish()
    return content + r.content, thinking + r.thinking, calls + r.calls


def splits(text: str, every: int = 1) -> list[list[str]]:
    """The text whole, char by char, and cut in two at every ``every``-th position."""
    out = [[text], list(text)]
    out += [[text[:i], text[i:]] for i in range(1, len(text), every)]
    return out


def simple(calls: list[ToolCall]) -> list[tuple[str, dict[str, Any], int, str | None]]:
    return [(c.name, c.arguments, c.index, c.id) for c in calls]


def check_all_splits(
    fmt: str, text: str, content: str, calls: list[Any], thinking: str = "", **kw: Any
) -> None:
    """Every way of streaming ``text`` gives the same content, thinking and calls."""
    for pieces in splits(text, 1 if len(text) < 400 else 7):
        got_content, got_thinking, got_calls = run(fmt, pieces, **kw)
        assert (got_content, got_thinking, simple(got_calls)) == (content, thinking, calls), pieces
