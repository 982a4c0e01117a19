"""A grammar that makes the model call one of the given tools (OpenAI's forced ``tool_choice``).

The call is written in the markup of the output format the model's chat template
teaches (:func:`localllm.toolcalls.detect_format`), so the format's own parser
reads it back; a template that teaches none gets Hermes' ``<tool_call>{..}
</tool_call>``, and the output parser is told to read that format.  JSON formats
get the tool's name and its parameters schema as the arguments; the XML-style
formats (Qwen3-Coder, Seed-OSS, GLM, and every tagged shape: MiniMax-M2, DSML,
Kimi K3, MiniCPM5, Muse, and the template-derived ones) get one tag per
parameter, required ones in the schema's order, then the optional ones, each
optional: a string parameter is free text without ``<``, any other is JSON for
its schema.  Gemma 4 gets its own literals (strings between ``<|"|>``), LFM2 a
Python call with JSON values as keyword arguments (its parser accepts JSON's
literals), MiniMax-M3 one namespaced tag per parameter.

Limits, by design: a parameters schema our JSON-Schema converter refuses
(``not``, ``if``, external ``$ref``) leaves the output unconstrained (the tools
are still offered to the model and its calls still parsed) rather than failing
the request; ``$defs`` of all forced tools share one namespace; and the
grammar leaves no room for a thinking block before the call (only for closing
one the prompt opened).  The tool list comes from the request, so the grammar has
the converter's budget (``grammar.rules``) over all tools together: tools, schemas
or names too large for it are a 400 (``GrammarTooLarge``), not an unconstrained
call, and so are more than ``MAX_TOOLS`` forced tools.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from localllm.api.wire import JSONObject, JSONValue
from localllm.errors import InvalidRequest
from localllm.grammar.json_schema import MAX_PROPERTIES, SchemaConverter
from localllm.grammar.rules import GrammarTooLarge, hint, literal
from localllm.toolcalls import ChatFormat, Family, detect_format
from localllm.toolcalls.jsonlist import JsonShape
from localllm.toolcalls.minimax import NS
from localllm.toolcalls.muse import CALLS as MUSE_CALLS
from localllm.toolcalls.tagged import IDENT, WILD, Shape, Tagged

log = logging.getLogger(__name__)

MAX_TOOLS = 1000

N, J, A = "\0name", "\0json-name", "\0args"  # placeholders: raw name, JSON-quoted name, args
_DS_CALL = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
_DS_END = "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
_SHAPES: dict[str, tuple[str, ...]] = {
    "hermes": ('<tool_call>\n{"name": ', J, ', "arguments": ', A, "}\n</tool_call>"),
    "llama3": ('{"name": ', J, ', "parameters": ', A, "}"),
    "mistral": ("[TOOL_CALLS]", N, "[ARGS]", A),
    "mistral_nemo": ('[TOOL_CALLS][{"name": ', J, ', "arguments": ', A, "}]"),
    "gpt_oss": ("<|channel|>commentary to=functions.", N, " <|constrain|>json<|message|>", A),
    "deepseek_r1": (_DS_CALL + "function<｜tool▁sep｜>", N, "\n```json\n", A, "\n```" + _DS_END),
    "deepseek_v3_1": (_DS_CALL, N, "<｜tool▁sep｜>", A, _DS_END),
    "kimi_k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
        N,
        ":0<|tool_call_argument_begin|>",
        A,
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
    "granite": ('<|tool_call|>[{"name": ', J, ', "arguments": ', A, "}]"),
    "command_r7b": (
        '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ',
        J,
        ', "parameters": ',
        A,
        "}]<|END_ACTION|>",
    ),
    "functionary_v3_2": (N, "\n", A),
    "nemotron_v2": ('<TOOLCALL>[{"name": ', J, ', "arguments": ', A, "}]</TOOLCALL>"),
    "apriel": ('<tool_calls>[{"name": ', J, ', "arguments": ', A, "}]</tool_calls>"),
}
# XML formats: (call open, function head, head end, param open, key end, value end, close)
_XML: dict[str, tuple[str, ...]] = {
    "qwen3_coder": (
        "<tool_call>\n<function=",
        ">\n",
        "<parameter=",
        ">\n",
        "\n</parameter>\n",
        "</function>\n</tool_call>",
    ),
    # Seed-OSS writes no newline around a value (its parser keeps one as the value's).
    "seed_oss": (
        "<seed:tool_call>\n<function=",
        ">\n",
        "<parameter=",
        ">",
        "</parameter>\n",
        "</function>\n</seed:tool_call>",
    ),
    "glm_4_5": (
        "<tool_call>",
        "\n",
        "<arg_key>",
        "</arg_key>\n<arg_value>",
        "</arg_value>\n",
        "</tool_call>",
    ),
}


def forced_tool_grammar(tools: Sequence[JSONObject], template: str) -> tuple[str, Family] | None:
    """(GBNF, format to parse) forcing one call of one of ``tools``; None if not expressible."""
    if len(tools) > MAX_TOOLS:
        raise GrammarTooLarge(f"tool_choice: at most {MAX_TOOLS} tools can be forced")
    fmt = detect_format(template)
    name = (
        fmt.name
        if fmt.name in _SHAPES
        or fmt.name in _XML
        or fmt.name in _OWN
        or isinstance(_shape(fmt), Shape | JsonShape)
        else "hermes"
    )
    defs: dict[str, JSONObject] = {}
    for tool in tools:
        params = _params(tool)
        for key in ("$defs", "definitions"):
            found = params.get(key)
            if isinstance(found, Mapping):
                defs.setdefault(key, {}).update(found)
    conv = SchemaConverter(defs)
    conv.set("root", "")  # reserve the name
    try:
        body = conv.join((f"({_call(conv, fmt, name, tool)})" for tool in tools), " | ")
        close = fmt.think_tags[1] if fmt.think_tags else ""
        if close and close in template:
            # The prompt may have opened a thinking block: the model may close it first.
            body = f'({conv.lit(close)} "\\n"{{0,2}})? ({body})'
        conv.set("root", body)
        return conv.finish(), name
    except GrammarTooLarge:
        raise
    except RecursionError:  # a safety net: the converter's depth cap comes first
        log.warning("tool_choice not enforced by a grammar: a schema nests too deeply")
        return None
    except InvalidRequest as exc:
        log.warning("tool_choice not enforced by a grammar: %s", exc.message)
        return None


def _params(tool: Mapping[str, JSONValue]) -> JSONObject:
    fn = tool.get("function") or {}
    params = fn.get("parameters") if isinstance(fn, Mapping) else None
    return dict(params) if isinstance(params, Mapping) else {"type": "object"}


def _shape(fmt: ChatFormat) -> Shape | JsonShape | None:
    """The tagged or JSON shape of a format that has one (the dedicated tagged formats
    and the template-derived ones)."""
    if fmt.derived is not None:
        return fmt.derived.shape
    if fmt.name in _SHAPES or fmt.name in _XML or fmt.name in _OWN:
        return None
    syntax = fmt.syntax()
    return syntax.shape if isinstance(syntax, Tagged) else None


def _call(conv: SchemaConverter, fmt: ChatFormat, name: str, tool: Mapping[str, Any]) -> str:
    fn = tool.get("function") or {}
    tool_name = str(fn.get("name", ""))
    params = {k: v for k, v in _params(tool).items() if k not in ("$defs", "definitions")}
    if name in _XML:
        return _xml_call(conv, _XML[name], tool_name, params)
    if name in _OWN:
        return _OWN[name](conv, tool_name, params)
    if name in _SHAPES:
        return _json_call(conv, _SHAPES[name], tool_name, params)
    shape = _shape(fmt)
    if isinstance(shape, JsonShape):
        call: tuple[str, ...] = (
            ("{", J, ": ", A, "}")
            if shape.name_as_key
            else (
                "{" + json.dumps(shape.name) + ": ",
                J,
                ", " + json.dumps(shape.args) + ": ",
                A,
                "}",
            )
        )
        if shape.listed:
            call = ("[", *call, "]")
        return _json_call(conv, (shape.open, *call, shape.close), tool_name, params)
    assert isinstance(shape, Shape)
    return _tagged_call(conv, shape, tool_name, params)


def _json_call(
    conv: SchemaConverter, parts: tuple[str, ...], name: str, params: Mapping[str, Any]
) -> str:
    args = conv.visit(params, hint(name, "args"))
    holes = {N: conv.lit(name), J: conv.lit(json.dumps(name, ensure_ascii=False)), A: args}
    return " ".join(holes.get(p) or _piece(conv, p) for p in parts if p)


def _piece(conv: SchemaConverter, text: str) -> str:
    """A markup piece: its text, with a short word for each varying run and an id."""
    out = []
    for part in re.split(f"({WILD}|{IDENT})", text):
        if part == WILD:
            out.append("[a-zA-Z0-9_]{1,12}")
        elif part == IDENT:
            out.append("[a-zA-Z0-9]{9}")
        elif part:
            out.append(conv.lit(part))
    return " ".join(out) or '""'


def _tagged_call(conv: SchemaConverter, shape: Shape, name: str, params: Mapping[str, Any]) -> str:
    head = (
        f"{_piece(conv, shape.section_open + shape.call_open)} {conv.lit(name)} "
        f"{_piece(conv, shape.name_end)}"
    )
    tail = _piece(conv, shape.call_close + shape.section_close)
    if shape.json_args:
        return f"{head} {conv.visit(params, hint(name, 'args'))} {tail}"
    args = _params_each(
        conv,
        name,
        params,
        lambda key, value: (
            f"{_piece(conv, shape.param_open)} {conv.lit(key)} {_piece(conv, shape.key_end)} "
            f"{value} {_piece(conv, shape.param_close)}"
        ),
    )
    return f"{head} {args} {tail}"


def _xml_call(
    conv: SchemaConverter, shape: tuple[str, ...], name: str, params: Mapping[str, Any]
) -> str:
    call_open, head_end, key_open, key_end, value_end, close = shape
    args = _params_each(
        conv,
        name,
        params,
        lambda key, value: f"{conv.lit(key_open + key + key_end)} {value} {literal(value_end)}",
    )
    return f"{conv.lit(call_open + name + head_end)} {args} {literal(close)}"


def _ordered(
    conv: SchemaConverter, params: Mapping[str, Any]
) -> tuple[Mapping[str, Any], list[str], set[str]]:
    """(properties, their order: required first, the required ones)."""
    props = params.get("properties")
    props = props if isinstance(props, Mapping) else {}
    listed = params.get("required")
    listed = listed if isinstance(listed, list) else []
    if len(props) > MAX_PROPERTIES or len(listed) > MAX_PROPERTIES:
        raise GrammarTooLarge(
            f"invalid format: an object may have at most {MAX_PROPERTIES} properties"
        )
    conv.walked(1 + len(params))
    required = list(dict.fromkeys(k for k in listed if isinstance(k, str) and k in props))
    must = set(required)
    return props, required + [str(k) for k in props if k not in must], must


def _params_each(
    conv: SchemaConverter, name: str, params: Mapping[str, Any], one: Callable[[str, str], str]
) -> str:
    """One tag per parameter (``one(key, value rule)``), the optional ones optional."""
    props, order, must = _ordered(conv, params)
    parts = []
    for key in order:
        item = one(key, _xml_value(conv, props[key], hint(name, key)))
        parts.append(item if key in must else f"({item})?")
    return conv.join(parts, " ") or '""'


def _listed(
    conv: SchemaConverter,
    name: str,
    params: Mapping[str, Any],
    sep: str,
    value: Callable[[Any, str], str],
) -> str:
    """The parameters as comma-separated members (Gemma's and Python's), the optional ones
    optional: each its key, ``sep`` and ``value(schema, hint)``."""
    props, order, must = _ordered(conv, params)
    items = [
        (
            conv.define(
                f"{hint(name, key)}-kv",
                f"{conv.lit(key + sep)} {value(props[key], hint(name, key))}",
            ),
            key in must,
            False,
        )
        for key in order
    ]
    return conv.members(items, hint(name, "args")) if items else ""


def _gemma(conv: SchemaConverter, name: str, params: Mapping[str, Any]) -> str:
    args = _listed(
        conv, name, params, ":", lambda schema, where: _gemma_value(conv, schema, where, 0)
    )
    return f"{conv.lit('<|tool_call>call:' + name + '{')} {args} {literal('}<tool_call|>')}"


def _gemma_value(conv: SchemaConverter, schema: Any, where: str, depth: int) -> str:
    """A value in Gemma's literal syntax for ``schema``: strings between ``<|"|>``, keys
    bare; numbers, booleans and null as in JSON."""
    q = literal('<|"|>')
    if "gemma-value" not in conv.rules:
        ws = conv.use("ws")
        conv.set("gemma-string", f"{q} [^<]* {q}")
        conv.set(
            "gemma-value",
            "gemma-string | gemma-object | gemma-array | "
            f"{conv.use('number')} | {conv.use('boolean')} | {conv.use('null')}",
        )
        conv.set(
            "gemma-object",
            f'"{{" {ws} ([a-zA-Z_] [a-zA-Z0-9_]* ":" gemma-value '
            f'("," {ws} [a-zA-Z_] [a-zA-Z0-9_]* ":" gemma-value)*)? "}}"',
        )
        conv.set("gemma-array", f'"[" {ws} (gemma-value ("," {ws} gemma-value)*)? "]"')
    if not isinstance(schema, Mapping) or depth > 16:
        return "gemma-value"
    conv.walked(1)
    kind = schema.get("type")
    raw = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if isinstance(raw, list) and raw and all(isinstance(v, str) for v in raw):
        conv.walked(len(raw))
        return f"{q} ({conv.join(map(conv.lit, raw), ' | ')}) {q}"
    if raw is not None or kind in ("integer", "number", "boolean", "null"):
        return conv.visit(schema, where)
    if kind == "string":
        return "gemma-string"
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        item = _gemma_value(conv, schema["items"], hint(where, "item"), depth + 1)
        ws = conv.use("ws")
        return conv.define(where, f'"[" {ws} ({item} ("," {ws} {item})*)? "]"')
    if kind == "object" and isinstance(schema.get("properties"), Mapping) and schema["properties"]:
        members = _listed(
            conv, where, schema, ":", lambda sub, at: _gemma_value(conv, sub, at, depth + 1)
        )
        return conv.define(where, f'"{{" {members} "}}"')
    return "gemma-value"


def _pythonic(conv: SchemaConverter, name: str, params: Mapping[str, Any]) -> str:
    args = _listed(conv, name, params, "=", conv.visit)
    head, tail = conv.lit("<|tool_call_start|>[" + name + "("), literal(")]<|tool_call_end|>")
    return f"{head} {args} {tail}"


def _minimax_m3(conv: SchemaConverter, name: str, params: Mapping[str, Any]) -> str:
    args = _params_each(
        conv,
        name,
        params,
        lambda key, value: f"{conv.lit(f'{NS}<{key}>')} {value} {conv.lit(f'{NS}</{key}>')}",
    )
    return (
        f"{conv.lit(f'{NS}<tool_call>{chr(10)}{NS}<invoke name={json.dumps(name)}>')} {args} "
        f"{literal(f'{NS}</invoke>{chr(10)}{NS}</tool_call>')}"
    )


def _muse(conv: SchemaConverter, name: str, params: Mapping[str, Any]) -> str:
    return f"{conv.lit(f' to={name}<|message|>')} {_tagged_call(conv, MUSE_CALLS, name, params)}"


_OWN: dict[str, Callable[[SchemaConverter, str, Mapping[str, Any]], str]] = {
    "gemma4": _gemma,
    "lfm2": _pythonic,
    "minimax_m3": _minimax_m3,
    "muse_glimmer": _muse,
}


def _xml_value(conv: SchemaConverter, schema: Any, hint: str) -> str:
    """A parameter's value as text: strings raw (as the parsers read them back), others JSON."""
    if isinstance(schema, Mapping):
        raw = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if isinstance(raw, list) and raw and all(isinstance(v, str) for v in raw):
            conv.walked(len(raw))
            return "(" + conv.join((conv.lit(v) for v in raw), " | ") + ")"
        kind = schema.get("type")
        if kind == "string" or (isinstance(kind, list) and "string" in kind):
            if "xml-text" not in conv.rules:
                conv.set("xml-text", "[^<]*")
            return "xml-text"
    return conv.visit(schema, hint)
