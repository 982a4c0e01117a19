"""Go-flavoured values for the template interpreter: printing, JSON, printf and builtins.

Values are Python ones: ``str``, ``int``, ``float``, ``bool``, ``None`` (nil),
``list`` (slices), ``dict`` (maps; ranged and printed in key order like Go) and
:class:`GoStruct` (Ollama's message/tool structs: fields by Go name, JSON by
the struct's json tags).  Printing follows ``fmt``'s ``%v`` and ``json``
follows ``encoding/json`` (compact, sorted map keys, HTML characters escaped),
because published templates were written against exactly that output.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from localllm.template.goparse import GoTemplateError

MAX_WIDTH = 10_000  # printf width/precision: "%0999999999d" must not allocate gigabytes


class GoStruct:
    """A Go struct value: ``fields`` by Go name, ``json_value`` as encoding/json writes it."""

    __slots__ = ("fields", "json_value", "stringer", "type_name")

    def __init__(self, type_name: str, fields: dict[str, Any], json_value: Any,
                 *, stringer: bool = False) -> None:
        self.type_name = type_name
        self.fields = fields
        self.json_value = json_value
        # Types with a String() method that returns their JSON (api.Tool, api.ToolFunction).
        self.stringer = stringer

    def __repr__(self) -> str:
        return f"GoStruct({self.type_name}, {self.fields!r})"


def truth(value: Any) -> bool:
    """Go template truthiness: false, 0, nil and empty strings/slices/maps are false."""
    if value is None:
        return False
    if isinstance(value, GoStruct):
        return True
    if isinstance(value, (bool, int, float)):
        return bool(value)
    if isinstance(value, (str, list, tuple, dict)):
        return len(value) > 0
    return True


def go_float(f: float) -> str:
    """``strconv.FormatFloat(f, 'g', -1, 64)`` as ``%v`` prints it."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == int(f) and abs(f) < 1e21:
        return str(int(f))
    text = repr(f)
    if "e" in text:
        mant, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        return f"{mant}e{sign}{exp.lstrip('+-').zfill(2)}"
    return text


def go_str(value: Any) -> str:
    """``fmt.Sprint`` of one value."""
    if isinstance(value, str):
        return value
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, JSONMap) or (isinstance(value, GoStruct) and value.stringer):
        return go_json(value)
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(_inner(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{_inner(k)}:{_inner(value[k])}" for k in sorted_keys(value)) \
            + "]"
    if isinstance(value, GoStruct):
        return "{" + " ".join(_inner(v) for v in value.fields.values()) + "}"
    return str(value)


def _inner(value: Any) -> str:
    # Inside a container a nil prints as Go's typed nil, not "<no value>".
    return "<nil>" if value is None else go_str(value)


def sorted_keys(d: dict[Any, Any]) -> list[Any]:
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=str)


class JSONMap(dict[str, Any]):
    """A map whose String() is its JSON (api.ToolCallFunctionArguments)."""


class StructJSON(dict[str, Any]):
    """A struct's JSON object: keys stay in field order (plain dicts are maps: sorted)."""


def _json_float(f: float) -> str:
    if not math.isfinite(f):
        raise GoTemplateError("json: unsupported value: non-finite float")
    if f == int(f) and abs(f) < 1e21:
        return str(int(f))
    if 1e-6 <= abs(f) < 1e21:
        return repr(f)
    mant, exp = repr(f).split("e") if "e" in repr(f) else (repr(f), "0")
    return f"{mant}e{'-' if exp.startswith('-') else '+'}{exp.lstrip('+-').zfill(2)}"


def _json_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    # encoding/json escapes HTML-significant characters and two JS line separators.
    return (out.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def go_json(value: Any) -> str:
    """``json.Marshal`` of ``value``: compact, map keys sorted, HTML escaped."""
    v = value
    if isinstance(v, GoStruct):
        return go_json(v.json_value)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _json_float(v)
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    if isinstance(v, dict):
        keys = list(v) if isinstance(v, StructJSON) else sorted(v, key=str)
        return "{" + ",".join(f"{_json_str(str(k))}:{go_json(v[k])}" for k in keys) + "}"
    return _json_str(str(v))


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+)?)?([a-zA-Z%])")


def go_sprintf(fmt: str, *args: Any) -> str:
    """``fmt.Sprintf`` for the verbs templates use: %v %s %d %q %f %g %e %x %X %t %c %%."""
    out: list[str] = []
    pos, argi = 0, 0
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[argi]
        argi += 1
        if (width and int(width) > MAX_WIDTH) or (prec and int(prec) > MAX_WIDTH):
            raise GoTemplateError(f"printf width or precision over {MAX_WIDTH}")
        out.append(_format_one(flags, width, prec, verb, arg))
    out.append(fmt[pos:])
    if argi < len(args):
        out.append("%!(EXTRA " + ", ".join(go_str(a) for a in args[argi:]) + ")")
    return "".join(out)


def _format_one(flags: str, width: str | None, prec: str | None, verb: str, arg: Any) -> str:
    spec = flags.replace("#", "") + (width or "") + (f".{prec}" if prec is not None else "")
    try:
        if verb in "vs":
            text = go_str(arg)
            if prec is not None:
                text = text[:int(prec)]
            return format(text, _align(flags, width))
        if verb == "q":
            return format(_json_str(go_str(arg)), _align(flags, width))
        if verb == "t" and isinstance(arg, bool):
            return format(go_str(arg), _align(flags, width))
        if verb == "c" and isinstance(arg, int):
            return format(chr(arg), _align(flags, width))
        if verb in "dxXob" and isinstance(arg, int) and not isinstance(arg, bool):
            return ("%" + spec + ("d" if verb == "d" else verb)) % arg if verb != "b" else \
                format(arg, spec.lstrip("-") + "b")
        if verb in "feEgG" and isinstance(arg, (int, float)) and not isinstance(arg, bool):
            return ("%" + spec + verb) % float(arg)
        if verb in "xX" and isinstance(arg, str):
            text = arg.encode().hex()
            return text.upper() if verb == "X" else text
    except (ValueError, TypeError, OverflowError):
        pass
    return f"%!{verb}({type(arg).__name__}={go_str(arg)})"


def _align(flags: str, width: str | None) -> str:
    if not width:
        return ""
    return ("<" if "-" in flags else ">") + width


# -- builtins ---------------------------------------------------------------------
def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "other"


def go_eq(a: Any, *others: Any) -> bool:
    if not others:
        raise GoTemplateError("missing argument for comparison")
    for b in others:
        if a is None or b is None:
            if a is b:
                return True
            continue
        if _kind(a) != _kind(b) or _kind(a) == "other":
            if _kind(a) == "other" and _kind(b) == "other":
                raise GoTemplateError("non-comparable types in eq")
            raise GoTemplateError("incompatible types for comparison")
        if a == b:
            return True
    return False


def _ordered(name: str, a: Any, b: Any) -> tuple[Any, Any]:
    if _kind(a) != _kind(b) or _kind(a) not in ("number", "string"):
        raise GoTemplateError(f"{name}: incompatible types for comparison")
    return a, b


def go_len(v: Any) -> int:
    if isinstance(v, (str, list, tuple, dict)):
        return len(v.encode() if isinstance(v, str) else v)
    if v is None:
        raise GoTemplateError("len of nil pointer")
    raise GoTemplateError(f"len of type {type(v).__name__}")


def go_index(v: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(v, dict):
            v = v.get(key)
        elif isinstance(v, (list, tuple, str)):
            if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < len(v):
                raise GoTemplateError(f"index out of range: {key}")
            v = v[key] if not isinstance(v, str) else v.encode()[key]
        elif v is None:
            raise GoTemplateError("index of untyped nil")
        else:
            raise GoTemplateError(f"can't index item of type {type(v).__name__}")
    return v


def go_slice(v: Any, *idx: Any) -> Any:
    if not isinstance(v, (str, list, tuple)):
        raise GoTemplateError(f"can't slice item of type {type(v).__name__}")
    if len(idx) > 3 or not all(isinstance(i, int) and not isinstance(i, bool) for i in idx):
        raise GoTemplateError("slice: bad indexes")
    lo = idx[0] if idx else 0
    hi = idx[1] if len(idx) > 1 else len(v)
    if not 0 <= lo <= hi <= len(v):
        raise GoTemplateError(f"slice: index out of range [{lo}:{hi}]")
    return v[lo:hi]


def go_print(*args: Any) -> str:
    out = []
    for i, a in enumerate(args):
        if i and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(go_str(a))
    return "".join(out)


FUNCS: dict[str, Callable[..., Any]] = {
    "json": go_json,
    "eq": go_eq,
    "ne": lambda a, b: not go_eq(a, b),
    "lt": lambda a, b: (lambda x, y: x < y)(*_ordered("lt", a, b)),
    "le": lambda a, b: (lambda x, y: x <= y)(*_ordered("le", a, b)),
    "gt": lambda a, b: (lambda x, y: x > y)(*_ordered("gt", a, b)),
    "ge": lambda a, b: (lambda x, y: x >= y)(*_ordered("ge", a, b)),
    "not": lambda a: not truth(a),
    "len": go_len,
    "index": go_index,
    "slice": go_slice,
    "print": go_print,
    "println": lambda *a: " ".join(go_str(x) for x in a) + "\n",
    "printf": lambda f, *a: go_sprintf(f if isinstance(f, str) else go_str(f), *a),
    "currentDate": lambda: date.today().strftime("%Y-%m-%d"),
    "yesterdayDate": lambda: (date.today() - timedelta(days=1)).strftime("%Y-%m-%d"),
}
# "and"/"or" evaluate lazily, so the executor handles them; they are valid names here.
FUNC_NAMES = {*FUNCS, "and", "or"}
