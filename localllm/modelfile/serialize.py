"""Write a :class:`Modelfile` back as text that ``parser.parse`` reads to the same value.

Used by ``/api/show`` (``show --modelfile``), so what a user sees is a Modelfile
they can edit and ``create`` again.  Values are written bare when that is
unambiguous, in ``"quotes"`` on one line otherwise, and in triple quotes when
they span lines or are templates, system prompts, licenses.
"""

from __future__ import annotations

import json
from typing import Any

from localllm.modelfile.parser import Modelfile, ModelfileError


def quote(value: str, *, block: bool = False) -> str:
    """``value`` as the parser will read it back exactly."""
    if "\n" in value or "\r" in value or block:
        if '"""' in value:
            # Nothing in the syntax can carry this; refuse rather than write a broken file.
            raise ModelfileError('a value containing """ cannot be written in a Modelfile')
        return f'"""{value}"""'
    if value == "" or value != value.strip() or value.startswith('"') or value.startswith("#"):
        return f'"{value}"'
    return value


def format_parameter(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        # repr keeps every digit, so the parsed float is the same float.
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    # Strings (stop sequences) are always quoted: "<|eot_id|>" reads better than bare.
    return quote(text) if "\n" in text else f'"{text}"'


def to_text(mf: Modelfile, *, header: list[str] | None = None) -> str:
    """The Modelfile text; ``header`` lines are written first as ``#`` comments."""
    lines = [f"# {h}" if h else "#" for h in header or []]
    if lines:
        lines.append("")
    lines.append(f"FROM {quote(mf.from_)}")
    for adapter in mf.adapters:
        lines.append(f"ADAPTER {quote(adapter)}")
    if mf.projector is not None:
        lines.append(f"PROJECTOR {quote(mf.projector)}")
    if mf.draft is not None:
        lines.append(f"DRAFT {quote(mf.draft)}")
    if mf.template is not None:
        lines.append(f"TEMPLATE {quote(mf.template, block=True)}")
    if mf.system is not None:
        lines.append(f"SYSTEM {quote(mf.system, block=True)}")
    for key, value in mf.parameters.items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {key} {format_parameter(item)}")
    for text in mf.licenses:
        lines.append(f"LICENSE {quote(text, block=True)}")
    for msg in mf.messages:
        lines.append(f"MESSAGE {msg['role']} {quote(msg['content'])}")
    if mf.requires:
        lines.append(f"REQUIRES {quote(mf.requires)}")
    return "\n".join(lines) + "\n"


# A Modelfile parameter's value: a number, a switch, text, or (stop) a list of texts.
ParamValue = str | int | float | bool | list[str]


def parameters_from_layer(params: Any) -> dict[str, ParamValue]:
    """A stored params layer as Modelfile parameters (stored text values stay text)."""
    if not isinstance(params, dict):
        return {}
    out: dict[str, ParamValue] = {}
    for key, value in params.items():
        if isinstance(value, (list, tuple)):
            out[str(key)] = [str(v) for v in value]
        elif isinstance(value, (str, int, float, bool)):
            out[str(key)] = value
        else:
            out[str(key)] = json.dumps(value)
    return out
