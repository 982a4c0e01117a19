"""Go-flavoured values for the template interpreter: printing, JSON, printf and builtins.

Values are Python ones: ``str``, ``int``, ``float``, ``bool``, ``None`` (nil),
``list`` (slices), ``dict`` (maps; ranged and printed in key order like Go) and
:class:`GoStruct` (Ollama's message/tool structs: fields by Go name, JSON by
the struct's json tags).  Printing follows ``fmt``'s ``%v`` and ``json``
follows ``encoding/json`` (compact, sorted map keys, HTML characters escaped),
because published templates were written against exactly that output.

Everything that makes a new string out of its arguments (``print``, ``println``,
``printf``, ``json`` and printing a value) takes a ``limit`` and refuses as soon
as its result would pass it, so a template cannot build a gigabyte in one call
(``print $x $x $x ...`` with a 4 MB ``$x``, ``printf "%9999v%9999v..."``).
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


class ResultTooLong(GoTemplateError):
    """A function's result would pass its ``limit``."""


class _Out:
    """A string being built, refused once it passes ``limit`` characters (None: no limit)."""

    __slots__ = ("left", "limit", "parts")

    def __init__(self, limit: int | None) -> None:
        self.parts: list[str] = []
        self.limit = limit
        self.left = -1 if limit is None else limit

    def add(self, text: str) -> None:
        if self.limit is not None:
            self.left -= len(text)
            if self.left < 0:
                raise ResultTooLong(f"result is over {self.limit} characters")
        self.parts.append(text)

    def text(self) -> str:
        return "".join(self.parts)


class GoStruct:
    """A Go struct value: ``fields`` by Go name, ``json_value`` as encoding/json writes it."""

    __slots__ = ("fields", "json_value", "stringer", "type_name")

    def __init__(
        self, type_name: str, fields: dict[str, Any], json_value: Any, *, stringer: bool = False
    ) -> None:
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


def go_str(value: Any, limit: int | None = None) -> str:
    """``fmt.Sprint`` of one value (refused past ``limit`` characters)."""
    if isinstance(value, str):
        if limit is not None and len(value) > limit:
            raise ResultTooLong(f"result is over {limit} characters")
        return value
    out = _Out(limit)
    _put_str(value, out, False)
    return out.text()


def _put_str(value: Any, out: _Out, inner: bool) -> None:
    if isinstance(value, str):
        out.add(value)
    elif value is None:
        # Inside a container a nil prints as Go's typed nil, not "<no value>".
        out.add("<nil>" if inner else "<no value>")
    elif isinstance(value, bool):
        out.add("true" if value else "false")
    elif isinstance(value, int):
        out.add(str(value))
    elif isinstance(value, float):
        out.add(go_float(value))
    elif isinstance(value, JSONMap) or (isinstance(value, GoStruct) and value.stringer):
        _put_json(value, out)
    elif isinstance(value, (list, tuple)):
        out.add("[")
        for i, item in enumerate(value):
            if i:
                out.add(" ")
            _put_str(item, out, True)
        out.add("]")
    elif isinstance(value, dict):
        out.add("map[")
        for i, key in enumerate(sorted_keys(value)):
            if i:
                out.add(" ")
            _put_str(key, out, True)
            out.add(":")
            _put_str(value[key], out, True)
        out.add("]")
    elif isinstance(value, GoStruct):
        out.add("{")
        for i, item in enumerate(value.fields.values()):
            if i:
                out.add(" ")
            _put_str(item, out, True)
        out.add("}")
    else:
        out.add(str(value))


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
    return (
        out.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def go_json(value: Any, limit: int | None = None) -> str:
    """``json.Marshal`` of ``value``: compact, map keys sorted, HTML escaped."""
    out = _Out(limit)
    _put_json(value, out)
    return out.text()


def _put_json(v: Any, out: _Out) -> None:
    if isinstance(v, GoStruct):
        _put_json(v.json_value, out)
    elif v is None:
        out.add("null")
    elif isinstance(v, bool):
        out.add("true" if v else "false")
    elif isinstance(v, int):
        out.add(str(v))
    elif isinstance(v, float):
        out.add(_json_float(v))
    elif isinstance(v, str):
        out.add(_json_str(v))
    elif isinstance(v, (list, tuple)):
        out.add("[")
        for i, item in enumerate(v):
            if i:
                out.add(",")
            _put_json(item, out)
        out.add("]")
    elif isinstance(v, dict):
        keys = list(v) if isinstance(v, StructJSON) else sorted(v, key=str)
        out.add("{")
        for i, key in enumerate(keys):
            out.add(("," if i else "") + _json_str(str(key)) + ":")
            _put_json(v[key], out)
        out.add("}")
    else:
        out.add(_json_str(str(v)))


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d+)?)?([a-zA-Z%])")


def go_sprintf(fmt: str, *args: Any, limit: int | None = None) -> str:
    """``fmt.Sprintf`` for the verbs templates use: %v %s %d %q %f %g %e %x %X %t %c %%."""
    out = _Out(limit)
    pos, argi = 0, 0
    for m in _VERB.finditer(fmt):
        out.add(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        if verb == "%":
            out.add("%")
            continue
        if argi >= len(args):
            out.add(f"%!{verb}(MISSING)")
            continue
        arg = args[argi]
        argi += 1
        for number in (width, prec):
            # Length first: int() of a few thousand digits is itself an error.
            if number and (len(number.lstrip("0")) > 6 or int(number) > MAX_WIDTH):
                raise GoTemplateError(f"printf width or precision over {MAX_WIDTH}")
        out.add(_format_one(flags, width, prec, verb, arg, limit))
    out.add(fmt[pos:])
    if argi < len(args):
        out.add("%!(EXTRA ")
        for i, extra in enumerate(args[argi:]):
            out.add((", " if i else "") + go_str(extra, limit))
        out.add(")")
    return out.text()


def _format_one(
    flags: str, width: str | None, prec: str | None, verb: str, arg: Any, limit: int | None
) -> str:
    spec = flags.replace("#", "") + (width or "") + (f".{prec}" if prec is not None else "")
    try:
        if verb in "vs":
            text = go_str(arg, limit)
            if prec is not None:
                text = text[: int(prec)]
            return format(text, _align(flags, width))
        if verb == "q":
            return format(_json_str(go_str(arg, limit)), _align(flags, width))
        if verb == "t" and isinstance(arg, bool):
            return format(go_str(arg), _align(flags, width))
        if verb == "c" and isinstance(arg, int):
            return format(chr(arg), _align(flags, width))
        if verb in "dxXob" and isinstance(arg, int) and not isinstance(arg, bool):
            return (
                ("%" + spec + ("d" if verb == "d" else verb)) % arg
                if verb != "b"
                else format(arg, spec.lstrip("-") + "b")
            )
        if verb in "feEgG" and isinstance(arg, (int, float)) and not isinstance(arg, bool):
            return ("%" + spec + verb) % float(arg)
        if verb in "xX" and isinstance(arg, str):
            text = arg.encode().hex()
            return text.upper() if verb == "X" else text
    except (ValueError, TypeError, OverflowError):
        pass
    return f"%!{verb}({type(arg).__name__}={go_str(arg, limit)})"


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
    if isinstance(v, str):
        return len(v) if v.isascii() else len(v.encode())  # Go counts bytes
    if isinstance(v, (list, tuple, dict)):
        return len(v)
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


def go_print(*args: Any, limit: int | None = None) -> str:
    out = _Out(limit)
    for i, a in enumerate(args):
        if i and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out.add(" ")
        _put_str(a, out, False)
    return out.text()


def go_println(*args: Any, limit: int | None = None) -> str:
    out = _Out(limit)
    for i, a in enumerate(args):
        if i:
            out.add(" ")
        _put_str(a, out, False)
    out.add("\n")
    return out.text()


def go_printf(fmt: Any, *args: Any, limit: int | None = None) -> str:
    return go_sprintf(fmt if isinstance(fmt, str) else go_str(fmt, limit), *args, limit=limit)


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
    "println": go_println,
    "printf": go_printf,
    "currentDate": lambda: date.today().strftime("%Y-%m-%d"),
    "yesterdayDate": lambda: (date.today() - timedelta(days=1)).strftime("%Y-%m-%d"),
}
# "and"/"or" evaluate lazily, so the executor handles them; they are valid names here.
FUNC_NAMES = {*FUNCS, "and", "or"}
# The functions that build a new string from their arguments take ``limit=``.
SIZED = frozenset({"json", "print", "println", "printf"})
