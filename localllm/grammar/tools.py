"""A grammar that makes the model call one of the given tools (OpenAI's forced ``tool_choice``).

The call is written in the markup of the output format the model's chat template
teaches (:func:`localllm.toolcalls.detect_format`), so the format's own parser
reads it back; a template that teaches none gets Hermes' ``<tool_call>{..}
</tool_call>``, and the output parser is told to read that format.  JSON formats
get the tool's name and its parameters schema as the arguments; the XML-style
formats (Qwen3-Coder, Seed-OSS, GLM) get one tag per parameter, required ones in
the schema's order, then the optional ones, each optional: a string parameter is
free text without ``<``, any other is JSON for its schema.

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
from collections.abc import Mapping
from typing import Any

from localllm.errors import InvalidRequest
from localllm.grammar.json_schema import MAX_PROPERTIES, SchemaConverter
from localllm.grammar.rules import GrammarTooLarge, hint, literal
from localllm.toolcalls import Family, detect_format

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
    "kimi_k2": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.", N,
                ":0<|tool_call_argument_begin|>", A,
                "<|tool_call_end|><|tool_calls_section_end|>"),
    "granite": ('<|tool_call|>[{"name": ', J, ', "arguments": ', A, "}]"),
    "command_r7b": ('<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ', J,
                    ', "parameters": ', A, "}]<|END_ACTION|>"),
    "functionary_v3_2": (N, "\n", A),
}
# XML formats: (call open, function head, head end, param open, key end, value end, close)
_XML: dict[str, tuple[str, ...]] = {
    "qwen3_coder": ("<tool_call>\n<function=", ">\n", "<parameter=", ">\n", "\n</parameter>\n",
                    "</function>\n</tool_call>"),
    "seed_oss": ("<seed:tool_call>\n<function=", ">\n", "<parameter=", ">\n",
                 "\n</parameter>\n", "</function>\n</seed:tool_call>"),
    "glm_4_5": ("<tool_call>", "\n", "<arg_key>", "</arg_key>\n<arg_value>",
                "</arg_value>\n", "</tool_call>"),
}


def forced_tool_grammar(tools: list[dict[str, Any]], template: str
                        ) -> tuple[str, Family] | None:
    """(GBNF, format to parse) forcing one call of one of ``tools``; None if not expressible."""
    if len(tools) > MAX_TOOLS:
        raise GrammarTooLarge(f"tool_choice: at most {MAX_TOOLS} tools can be forced")
    fmt = detect_format(template)
    name = fmt.name if fmt.name in _SHAPES or fmt.name in _XML else "hermes"
    defs: dict[str, Any] = {}
    for tool in tools:
        params = _params(tool)
        for key in ("$defs", "definitions"):
            if isinstance(params.get(key), Mapping):
                defs.setdefault(key, {}).update(params[key])
    conv = SchemaConverter(defs)
    conv.set("root", "")  # reserve the name
    try:
        body = conv.join((f"({_call(conv, name, tool)})" for tool in tools), " | ")
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


def _params(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") or {}
    params = fn.get("parameters") if isinstance(fn, Mapping) else None
    return dict(params) if isinstance(params, Mapping) else {"type": "object"}


def _call(conv: SchemaConverter, fmt: str, tool: Mapping[str, Any]) -> str:
    fn = tool.get("function") or {}
    name = str(fn.get("name", ""))
    params = {k: v for k, v in _params(tool).items() if k not in ("$defs", "definitions")}
    if fmt in _XML:
        return _xml_call(conv, _XML[fmt], name, params)
    args = conv.visit(params, hint(name, "args"))
    parts = {N: conv.lit(name), J: conv.lit(json.dumps(name, ensure_ascii=False)), A: args}
    return " ".join(parts.get(p) or literal(p) for p in _SHAPES[fmt])


def _xml_call(conv: SchemaConverter, shape: tuple[str, ...], name: str,
              params: Mapping[str, Any]) -> str:
    call_open, head_end, key_open, key_end, value_end, close = shape
    props = params.get("properties")
    props = props if isinstance(props, Mapping) else {}
    listed = params.get("required")
    listed = listed if isinstance(listed, list) else []
    if len(props) > MAX_PROPERTIES or len(listed) > MAX_PROPERTIES:
        raise GrammarTooLarge(
            f"invalid format: an object may have at most {MAX_PROPERTIES} properties")
    conv.walked(1 + len(params))
    required = list(dict.fromkeys(k for k in listed if isinstance(k, str) and k in props))
    must = set(required)
    order = required + [k for k in props if k not in must]
    parts = [conv.lit(call_open + name + head_end)]
    for key in order:
        value = _xml_value(conv, props[key], hint(name, str(key)))
        one = f"{conv.lit(key_open + str(key) + key_end)} {value} {literal(value_end)}"
        parts.append(one if key in must else f"({one})?")
    parts.append(literal(close))
    return conv.join(parts, " ")


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
