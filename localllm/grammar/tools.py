"""A grammar that makes the model call one of the given tools (OpenAI's forced ``tool_choice``).

The call is written in the markup the model's chat template teaches (see
:func:`localllm.template.tools.detect_family`); a template that teaches none
gets Hermes' ``<tool_call>{..}</tool_call>``, and the output parser is told to
read that family.  Inside the markup the grammar accepts
``{"name": <one of the tools>, "arguments": <that tool's parameters schema>}``.

Limits, by design: a parameters schema our JSON-Schema converter refuses
(``not``, ``if``, external ``$ref``) leaves the output unconstrained (the tools
are still offered to the model and its calls still parsed) rather than failing
the request; ``$defs`` of all forced tools share one namespace; and the
grammar leaves no room for a thinking block before the call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from localllm.errors import InvalidRequest
from localllm.grammar.json_schema import literal, schema_to_grammar
from localllm.template.tools import Family, detect_family

log = logging.getLogger(__name__)

_WRAP: dict[Family, tuple[str, str]] = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "llama3": ("", ""),
    "mistral": ("[TOOL_CALLS][", "]"),
}


def _call_schema(tool: Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") or {}
    params = fn.get("parameters") or {"type": "object"}
    if isinstance(params, Mapping):
        for key in ("$defs", "definitions"):
            if isinstance(params.get(key), Mapping):
                defs.setdefault(key, {}).update(params[key])
        params = {k: v for k, v in params.items() if k not in ("$defs", "definitions")}
    return {"type": "object", "properties": {"name": {"const": fn.get("name", "")},
                                             "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False}


def forced_tool_grammar(tools: list[dict[str, Any]], template: str
                        ) -> tuple[str, Family] | None:
    """(GBNF, family to parse) forcing one call of one of ``tools``; None if not expressible."""
    family = detect_family(template) or "hermes"
    defs: dict[str, Any] = {}
    calls = [_call_schema(t, defs) for t in tools]
    schema: dict[str, Any] = calls[0] if len(calls) == 1 else {"anyOf": calls}
    schema = {**schema, **defs}
    try:
        grammar = schema_to_grammar(schema)
    except InvalidRequest as exc:
        log.warning("tool_choice not enforced by a grammar: %s", exc.message)
        return None
    head, _, rest = grammar.partition("\n")
    body = head.removeprefix("root ::= ")
    open_tag, close_tag = _WRAP[family]
    parts = [literal(open_tag)] if open_tag else []
    parts.append(f"({body})")
    if close_tag:
        parts.append(literal(close_tag))
    return f"root ::= {' '.join(parts)}\n{rest}", family
