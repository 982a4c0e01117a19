"""Render a chat with an Ollama Go TEMPLATE, the way Ollama's ``template.Execute`` does.

Data given to the template: ``.System`` (every system message, joined),
``.Messages`` (consecutive messages of one role merged), ``.Tools``,
``.Response`` (empty), ``.Think``/``.ThinkLevel``/``.IsThinkSet``.  Messages and
tools are Go structs with Ollama's field names (``.Role``, ``.Content``,
``.ToolCalls[].Function.Name``/``.Arguments``, ``.Function.Parameters.Properties``
…) and Ollama's JSON shapes for ``json``.

Templates that never mention ``.Messages`` (older Llama 2 / Mistral style,
``{{ .System }} {{ .Prompt }}``) are rendered once per user turn with
``.System``/``.Prompt``/``.Response`` and concatenated; the last turn is cut
right after ``{{ .Response }}`` so that the prompt ends where the model's answer
starts.

One render has one budget (``gotemplate.Budget``: steps, output, seconds), however
many turns the legacy path executes the template for, and merging a run of
same-role messages joins their contents once (not once per message).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from localllm.api.wire import JSONObject
from localllm.template.gofuncs import GoStruct, JSONMap, StructJSON
from localllm.template.goparse import Action, Branch, Chain, Field, Pipe, Text
from localllm.template.gotemplate import Budget, GoTemplate


@lru_cache(maxsize=32)
def compiled(source: str) -> GoTemplate:
    return GoTemplate(source)


def _omit(obj: dict[str, Any], *keys: str) -> StructJSON:
    """A struct's JSON with ``omitempty`` fields dropped when empty."""
    return StructJSON(
        (k, v) for k, v in obj.items() if k not in keys or v not in (None, "", [], {})
    )


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def tool_call(call: dict[str, Any], index: int) -> GoStruct:
    fn = call.get("function") or {}
    args = JSONMap(_arguments(fn.get("arguments")))
    fstruct = GoStruct(
        "api.ToolCallFunction",
        {"Index": fn.get("index", index), "Name": fn.get("name", ""), "Arguments": args},
        _omit(
            {"index": fn.get("index", index), "name": fn.get("name", ""), "arguments": args},
            "index",
        ),
    )
    call_id = call.get("id") or ""
    return GoStruct(
        "api.ToolCall",
        {"ID": call_id, "Function": fstruct},
        _omit({"id": call_id, "function": fstruct}, "id"),
    )


def message(msg: dict[str, Any]) -> GoStruct:
    content = msg.get("content")
    content = "" if content is None else content if isinstance(content, str) else str(content)
    calls = [tool_call(c, i) for i, c in enumerate(msg.get("tool_calls") or [])]
    fields = {
        "Role": str(msg.get("role", "")),
        "Content": content,
        "Thinking": str(msg.get("thinking") or ""),
        "Images": list(msg.get("images") or []),
        "ToolCalls": calls,
        "ToolName": str(msg.get("tool_name") or msg.get("name") or ""),
        "ToolCallID": str(msg.get("tool_call_id") or ""),
    }
    js = _omit(
        {
            "role": fields["Role"],
            "content": content,
            "thinking": fields["Thinking"],
            "images": fields["Images"],
            "tool_calls": calls,
            "tool_name": fields["ToolName"],
            "tool_call_id": fields["ToolCallID"],
        },
        "thinking",
        "images",
        "tool_calls",
        "tool_name",
        "tool_call_id",
    )
    return GoStruct("api.Message", fields, js)


def _prop(raw: Any) -> GoStruct:
    p = raw if isinstance(raw, dict) else {}
    typ = p.get("type")
    types = typ if isinstance(typ, list) else [typ] if typ else []
    # PropertyType marshals a single type as a plain string.
    js_type: Any = types[0] if len(types) == 1 else types
    fields = {
        "Type": types,
        "Items": p.get("items"),
        "Description": p.get("description", ""),
        "Enum": p.get("enum"),
        "Properties": p.get("properties"),
    }
    js = _omit(
        {
            "type": js_type,
            "items": p.get("items"),
            "description": fields["Description"],
            "enum": p.get("enum"),
            "properties": p.get("properties"),
        },
        "type",
        "items",
        "description",
        "enum",
        "properties",
    )
    return GoStruct("api.ToolProperty", fields, js)


def tool(raw: dict[str, Any]) -> GoStruct:
    fn = raw.get("function") or {}
    params = fn.get("parameters") or {}
    props = {str(k): _prop(v) for k, v in (params.get("properties") or {}).items()}
    required = list(params.get("required") or [])
    pstruct = GoStruct(
        "api.ToolFunctionParameters",
        {
            "Type": params.get("type", "object"),
            "Defs": params.get("$defs"),
            "Items": params.get("items"),
            "Required": required,
            "Properties": props,
        },
        _omit(
            {
                "type": params.get("type", "object"),
                "$defs": params.get("$defs"),
                "items": params.get("items"),
                "required": required,
                "properties": props,
            },
            "$defs",
            "items",
            "required",
        ),
    )
    fstruct = GoStruct(
        "api.ToolFunction",
        {
            "Name": fn.get("name", ""),
            "Description": fn.get("description", ""),
            "Parameters": pstruct,
        },
        _omit(
            {
                "name": fn.get("name", ""),
                "description": fn.get("description", ""),
                "parameters": pstruct,
            },
            "description",
        ),
        stringer=True,
    )
    return GoStruct(
        "api.Tool",
        {"Type": raw.get("type", "function"), "Items": raw.get("items"), "Function": fstruct},
        _omit(
            {"type": raw.get("type", "function"), "items": raw.get("items"), "function": fstruct},
            "items",
        ),
        stringer=True,
    )


def collate(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(all system text joined, messages with same-role neighbours merged), as Ollama."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    runs: list[list[str]] = []  # the contents of each merged message, joined at the end
    for msg in messages:
        content = msg.get("content") or ""
        if msg.get("role") == "system":
            system.append(content)
        if out and out[-1].get("role") == msg.get("role"):
            runs[-1].append(content)
        else:
            out.append(dict(msg))
            runs.append([out[-1].get("content") or ""])
    for msg, run in zip(out, runs, strict=True):
        if len(run) > 1:
            msg["content"] = "\n\n".join(run)
    return "\n\n".join(system), out


def render_go(
    source: str,
    messages: list[JSONObject],
    *,
    tools: list[JSONObject] | None = None,
    think: bool | None = None,
    think_level: str = "",
) -> str:
    """The prompt for ``messages`` under the Go template ``source``."""
    tpl = compiled(source)
    system, merged = collate(messages)
    budget = Budget()
    if "messages" in tpl.field_names():
        return tpl.execute(
            {
                "System": system,
                "Messages": [message(m) for m in merged],
                "Tools": [tool(t) for t in tools or []],
                "Response": "",
                "Think": bool(think),
                "ThinkLevel": think_level,
                "IsThinkSet": think is not None,
            },
            budget=budget,
        )
    return _render_legacy(tpl, merged, budget)


def _render_legacy(tpl: GoTemplate, messages: list[dict[str, Any]], budget: Budget) -> str:
    parts: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def flush() -> None:
        parts.append(tpl.execute(dict(turn), budget=budget))
        turn.update(System="", Prompt="", Response="")

    for msg in messages:
        role, content = msg.get("role"), msg.get("content") or ""
        if role == "system":
            if turn["Prompt"] or turn["Response"]:
                flush()
            turn["System"] = content
        elif role == "user":
            if turn["Response"]:
                flush()
            turn["Prompt"] = content
        elif role == "assistant":
            turn["Response"] = content
    last = GoTemplate.__new__(GoTemplate)
    last.source, last.nodes = tpl.source, _cut_after_response(tpl.nodes, [False])
    parts.append(last.execute(dict(turn), budget=budget))
    return "".join(parts)


def _cut_after_response(nodes: list[Any], cut: list[bool]) -> list[Any]:
    """A copy of ``nodes`` without everything after the first ``.Response`` field."""
    out: list[Any] = []
    for node in nodes:
        if cut[0]:
            break
        if isinstance(node, Text):
            out.append(node)
        elif isinstance(node, Action):
            pipe = _cut_pipe(node.pipe, cut)
            if pipe is not None:
                out.append(Action(pipe, node.line))
        elif isinstance(node, Branch):
            body = _cut_after_response(node.body, cut)
            orelse = None if node.orelse is None else _cut_after_response(node.orelse, cut)
            out.append(Branch(node.kind, node.pipe, body, orelse, node.line))
        else:
            out.append(node)
    return out


def _cut_pipe(pipe: Pipe, cut: list[bool]) -> Pipe | None:
    cmds = []
    for cmd in pipe.cmds:
        args = []
        for arg in cmd:
            if cut[0]:
                break
            if isinstance(arg, Chain):
                inner = _cut_pipe(arg.pipe, cut)
                if inner is not None:
                    args.append(Chain(inner, arg.names))
                continue
            args.append(arg)
            if isinstance(arg, Field) and "Response" in arg.names:
                cut[0] = True
        if args:
            cmds.append(args)
    return Pipe(pipe.decl, pipe.assign, cmds) if cmds else None
