"""Size rules for what a chat template calls: the methods of strings, bytes and ints, a
few globals, and the arithmetic operators; and the estimates the filters share.

Every call and operator is already bounded in general (``jinja_env``): its operands
and its result are sized against the limits of one value, and the deadline runs
inside it.  That comes too late for a call whose result can be far larger than what
it was given, built in C where nothing can stop it, so those are listed here, each
with what it would build worked out *before* it runs: widths and counts; a separator
or a replacement repeated; format fields; a list's references repeated; an integer's
bits.  (Jinja's filters are in ``jinja_filters``.)
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sized
from typing import Any

from jinja2.utils import generate_lorem_ipsum

from localllm.template.jinja_limits import MAX_INT_BITS, MAX_VALUE_ITEMS, MAX_WIDTH, Budget

# A call's positional and keyword arguments, as the template gave them.
Args = tuple[Any, ...]
Kwargs = Mapping[str, object]

_WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"
_WIDE_WHITESPACE = (
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_PRINTF = re.compile(r"%(?:\([^()]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)
_DIGITS = re.compile(r"\d+")


def arg(args: Args, kwargs: Kwargs, index: int, name: str, default: Any = None) -> Any:
    """The argument at ``index`` (after the value), or named ``name``."""
    return args[index] if len(args) > index else kwargs.get(name, default)


def text_of(b: Budget, value: Any, what: str) -> str:
    """``value`` as the text a filter makes of it (sized first: ``str`` of a list runs in C)."""
    if isinstance(value, str):
        return value
    b.size(value, what)
    return str(value)


def _width(text: str) -> int:
    return int(text) if len(text) <= 7 else MAX_WIDTH + 1


def items_of(b: Budget, value: Any, what: str) -> Any:
    """``value`` itself if it has a length (checked), else its items in a list (counted as
    they come, so an endless generator cannot fill memory)."""
    if isinstance(value, Sized):
        b.check_items(len(value), what)
        return value
    out = []
    for item in value:
        out.append(item)
        if len(out) > MAX_VALUE_ITEMS:
            b.check_items(len(out), what)
    return out


def _chars(b: Budget, values: Iterable[Any], what: str) -> int:
    return max((b.size(v, what)[1] for v in values), default=0)


def check_repeat(b: Budget, value: Any, count: int, what: str) -> None:
    """``count`` copies of ``value`` (or references to it) in one new value."""
    items, chars, _ = b.size(value, what)
    count = max(count, 0)
    if not isinstance(value, (str, bytes)):  # a list's own slot is not repeated
        b.check_items(
            count * (items - 1) + 1 if isinstance(value, (list, tuple)) else count * items, what
        )
    b.check_chars(count * chars, what)


def check_printf(b: Budget, fmt: str | bytes, values: Any) -> None:
    """``fmt % values`` (the ``%`` operator, the ``format`` filter)."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    fields, widest, star = 0, 0, False
    for m in _PRINTF.finditer(text):
        if m.group(3) == "%":
            continue
        fields += 1
        if not fields % 4096:  # a format string of 4 MiB holds 2 million fields
            b.tick()
        for part in (m.group(1), m.group(2)):
            star = star or part == "*"
            if part and part != "*":
                widest = max(widest, _width(part))
    b.check_width(widest, "a width or precision in a % format")
    given = (
        list(values.values())
        if isinstance(values, Mapping)
        else list(values)
        if isinstance(values, tuple)
        else [values]
    )
    _check_filled(b, len(text) + fields * widest, fields, given, star, _PRINTF_SAYS)


def check_format(b: Budget, fmt: str, args: Args, kwargs: Mapping[Any, Any]) -> None:
    """``fmt.format(*args, **kwargs)`` or ``fmt.format_map(kwargs)``."""
    fields, widest, nested = 0, 0, False
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # the call itself refuses it
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        fields += 1 + (spec or "").count("{")
        if not fields % 4096:
            b.tick()
        nested = nested or "{" in (spec or "")
        for digits in _DIGITS.findall(spec or ""):
            widest = max(widest, _width(digits))
    b.check_width(widest, "a width or precision in a format string")
    given = [*args, *kwargs.values()]
    _check_filled(b, len(fmt) + fields * widest, fields, given, nested, _FORMAT_SAYS)


# What a refusal says of each kind of format: (a width given as a value, a value, the text).
_PRINTF_SAYS = ("a * width in a % format", "a value given to %", "the text % formatting makes")
_FORMAT_SAYS = (
    "a width given to a format field",
    "a value given to format",
    "the text format makes",
)


def _check_filled(
    b: Budget, fixed: int, fields: int, given: list[Any], widths: bool, says: tuple[str, str, str]
) -> None:
    """The text a format makes: ``fixed`` characters (its own and its widths') plus
    ``fields`` times the widest of ``given``; where the values include widths (``*``,
    nested fields: ``widths``), each is checked as one."""
    if widths:
        for v in given:
            b.check_width(v, says[0])
    b.check_chars(fixed + fields * _chars(b, given, says[1]), says[2])


def check_replace(b: Budget, text: str | bytes, old: Any, new: Any, count: Any) -> None:
    if isinstance(text, str):
        old, new = str(old), str(new)
    n = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    b.check_chars(len(text) + n * max(len(new) - len(old), 0), "the text replace makes")


def check_join(b: Budget, sep: str | bytes, items: Iterable[Any]) -> None:
    values = list(items)
    total = sum(b.size(v, "an item given to join")[1] for v in values)
    b.check_chars(total + max(len(values) - 1, 0) * len(sep), "the text join makes")


def _count(text: Any, chars: str) -> int:
    """How many of ``chars`` are in ``text`` (str or bytes)."""
    if isinstance(text, bytes):
        return sum(text.count(c.encode("latin-1")) for c in chars)
    return sum(text.count(c) for c in chars)


def _check_split(b: Budget, text: str | bytes, sep: Any, maxsplit: Any) -> None:
    if sep is None:
        n = _count(
            text,
            _WHITESPACE
            if isinstance(text, bytes) or text.isascii()
            else _WHITESPACE + _WIDE_WHITESPACE,
        )
    else:
        n = text.count(sep) if sep else 0
    if isinstance(maxsplit, int) and maxsplit >= 0:
        n = min(n, maxsplit)
    b.check_items(n + 1, "the list split makes")


# -- calls and operators ----------------------------------------------------------------
def _str_method(b: Budget, text: str | bytes, name: str, args: Args, kwargs: Kwargs) -> Args:
    if name in ("center", "ljust", "rjust", "zfill"):
        b.check_width(arg(args, kwargs, 0, "width"), f"the width given to {name}")
    elif name == "expandtabs":
        size = arg(args, kwargs, 0, "tabsize", 8)
        b.check_width(size, "the tab size given to expandtabs")
        tab = b"\t" if isinstance(text, bytes) else "\t"
        b.check_chars(
            len(text) + text.count(tab) * max(int(size), 0),  # type: ignore[arg-type]
            "the text expandtabs makes",
        )
    elif name == "replace":
        check_replace(
            b,
            text,
            arg(args, kwargs, 0, "old"),
            arg(args, kwargs, 1, "new"),
            arg(args, kwargs, 2, "count"),
        )
    elif name == "join" and args:
        items = items_of(b, args[0], "the list given to join")
        check_join(b, text, items)
        return (items, *args[1:])
    elif name == "translate" and args and isinstance(text, str):
        table = args[0]
        values = (
            table.values()
            if isinstance(table, Mapping)
            else table
            if isinstance(table, (list, tuple))
            else ()
        )
        longest = max((len(v) for v in values if isinstance(v, str)), default=1)
        b.check_chars(len(text) * longest, "the text translate makes")
    elif name in ("split", "rsplit"):
        _check_split(b, text, arg(args, kwargs, 0, "sep"), arg(args, kwargs, 1, "maxsplit"))
    elif name == "splitlines":
        b.check_items(
            1 + _count(text, "\n\r" if isinstance(text, bytes) else _LINE_BREAKS),
            "the list splitlines makes",
        )
    return args


def check_call(b: Budget, obj: Any, args: Args, kwargs: Kwargs) -> Args:
    """Before a method or global function is called; returns the arguments to call it with."""
    inner = getattr(obj, "__wrapped__", None)  # the sandbox's wrapper of str.format
    target = getattr(inner, "__self__", None)
    name = getattr(inner, "__name__", None)
    if isinstance(target, str) and name in ("format", "format_map"):
        mapping = args[0] if name == "format_map" and args else kwargs
        check_format(
            b,
            target,
            args if name == "format" else (),
            mapping if isinstance(mapping, Mapping) else {},
        )
        return args
    owner = getattr(obj, "__self__", None)
    name = str(getattr(obj, "__name__", ""))
    if isinstance(owner, (str, bytes)):
        return _str_method(b, owner, name, args, kwargs)
    if isinstance(owner, int) and name == "to_bytes":
        b.check_width(arg(args, kwargs, 0, "length", 1), "the length given to to_bytes")
    elif name == "fromkeys" and args:
        keys = items_of(b, args[0], "the keys given to fromkeys")
        check_repeat(b, arg(args, kwargs, 1, "value"), len(keys), "the dict fromkeys makes")
        return (keys, *args[1:])
    elif obj is generate_lorem_ipsum:
        n = arg(args, kwargs, 0, "n", 5)
        words = max(arg(args, kwargs, 2, "min", 20), arg(args, kwargs, 3, "max", 100))
        b.check_width(n, "the count given to lipsum")
        b.check_width(words, "the word count given to lipsum")
        b.check_chars(n * words * 16, "the text lipsum makes")
    return args


def check_binop(b: Budget, operator: str, left: Any, right: Any) -> None:
    """Before ``left <operator> right`` (every arithmetic operator is intercepted)."""
    if operator == "*":
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int):
                check_repeat(b, seq, count, "the value * makes")
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and left.bit_length() + right.bit_length() > MAX_INT_BITS
        ):
            b.fail(f"the product would have more than {MAX_INT_BITS:,} bits")
    elif operator == "**":
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and right > 0
            and abs(left) > 1
            and left.bit_length() * right > MAX_INT_BITS
        ):
            b.fail(f"the power would have more than {MAX_INT_BITS:,} bits")
    elif operator == "%" and isinstance(left, (str, bytes)):
        check_printf(b, left, right)
