"""Size rules for Jinja's filters, worked out before each runs (see ``jinja_rules``).

Every filter is wrapped (``jinja_env``): its value, arguments and result are sized
against the limits of one value, and the deadline runs inside it.  The filters here
can build far more than they are given (widths, indents and counts; a separator or
a replacement repeated; format fields; copies made while summing), or order items in
C where no deadline reaches: what they would build is worked out first.  A filter
known to be linear is in ``LINEAR_FILTERS``.  Any other filter (one a later Jinja
adds) gets the careful default: every number it is given is held to ``MAX_WIDTH``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sized
from typing import Any

from jinja2.filters import make_attrgetter

from localllm.template.jinja_limits import MAX_SORT_ITEMS, MAX_VALUE_ITEMS, Budget
from localllm.template.jinja_rules import (
    Args,
    Kwargs,
    arg,
    check_join,
    check_printf,
    check_replace,
    items_of,
    text_of,
)

# Filters whose result is about as large as what they are given (or smaller), in time
# about as long: nothing to work out before they run.  (Their numbers were read: truncate's
# length only cuts, int's base must be 2-36, default's is a value.)
LINEAR_FILTERS = frozenset(
    {
        "abs",
        "attr",
        "capitalize",
        "count",
        "d",
        "default",
        "e",
        "escape",
        "filesizeformat",
        "first",
        "float",
        "forceescape",
        "int",
        "items",
        "last",
        "length",
        "lower",
        "map",
        "max",
        "min",
        "random",
        "reject",
        "rejectattr",
        "reverse",
        "safe",
        "select",
        "selectattr",
        "string",
        "striptags",
        "title",
        "trim",
        "truncate",
        "unique",
        "upper",
        "urlencode",
        "wordcount",
        "xmlattr",
    }
)

FilterRule = Callable[[Budget, Any, Any, Args, Kwargs], Any]


def _sortable(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    value = items_of(b, value, "the list given to a sorting filter")
    if len(value) > MAX_SORT_ITEMS:
        b.fail(f"a sorting filter was given {len(value):,} items; at most {MAX_SORT_ITEMS:,}")
    return value


def _join(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    value = items_of(b, value, "the list given to join")
    attribute = arg(args, kwargs, 1, "attribute")
    shown = value if attribute is None else map(make_attrgetter(env, attribute), value)
    check_join(b, str(arg(args, kwargs, 0, "d", "")), shown)
    return value


def _sum(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    value = items_of(b, value, "the list given to sum")
    attribute, start = arg(args, kwargs, 0, "attribute"), arg(args, kwargs, 1, "start", 0)
    terms = list(value if attribute is None else map(make_attrgetter(env, attribute), value))
    if isinstance(start, (str, bytes, list, tuple)) or any(
        isinstance(t, (list, tuple)) for t in terms
    ):
        # Adding sequences copies the running total at every step.
        total = work = b.size(start, "the start given to sum")[0]
        for term in terms:
            total += b.size(term, "an item given to sum")[0]
            work += total
        b.check_items(total, "the list sum makes")
        b.check_items(work // 16, "the copying sum does (in sixteenths)")
    return value


def _tojson(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    if isinstance(value, Iterator):
        # ``x|map(...)|tojson``: a generator, which llama.cpp's renderer prints as a list
        # (templates written for it do this) and json.dumps refuses.  Read it, bounded.
        value = list(itertools.islice(value, MAX_VALUE_ITEMS + 1))
        b.check_items(len(value), "the list given to tojson")
    items, chars, depth = b.size(value, "the value given to tojson")
    indent = arg(args, kwargs, 0, "indent")
    b.check_width(indent, "the indent given to tojson")
    step = len(indent) if isinstance(indent, str) else int(indent or 0)
    seps = arg(args, kwargs, 2, "separators") or (", ", ": ")
    b.check_chars(
        chars + items * (depth * step + len(str(seps[0])) + len(str(seps[-1])) + 2),
        "the text tojson makes",
    )
    return value


def _pprint(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    items, chars, depth = b.size(value, "the value given to pprint")
    b.check_chars(chars + items * (depth + 4), "the text pprint makes")
    return value


def _indent(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    width = arg(args, kwargs, 0, "width", 4)
    b.check_width(width, "the width given to indent")
    text = text_of(b, value, "the text given to indent")
    step = len(width) if isinstance(width, str) else max(int(width), 0)
    b.check_chars(len(text) + (text.count("\n") + 1) * step, "the text indent makes")
    return value


def _wordwrap(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    width = arg(args, kwargs, 0, "width", 79)
    b.check_width(width, "the width given to wordwrap")
    wrap = arg(args, kwargs, 2, "wrapstring")
    text = text_of(b, value, "the text given to wordwrap")
    # A line ends where the next word does not fit: it, or the line, is over half a width.
    lines = 4 * len(text) // max(int(width), 1) + text.count("\n") + 2
    b.check_chars(
        len(text) + lines * (1 if wrap is None else len(str(wrap))), "the text wordwrap makes"
    )
    return value


def _urlize(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    text = text_of(b, value, "the text given to urlize")
    extra = sum(len(str(arg(args, kwargs, i, n) or "")) for i, n in ((2, "target"), (3, "rel")))
    b.check_chars(3 * len(text) + (len(text) // 4 + 1) * (extra + 64), "the text urlize makes")
    return value


def _replace(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    check_replace(
        b,
        text_of(b, value, "the text given to replace"),
        arg(args, kwargs, 0, "old"),
        arg(args, kwargs, 1, "new"),
        arg(args, kwargs, 2, "count"),
    )
    return value


def _format(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    check_printf(b, text_of(b, value, "the format given to format"), kwargs or args)
    return value


def _width_rule(index: int, name: str, filter_name: str) -> FilterRule:
    def rule(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
        b.check_width(arg(args, kwargs, index, name), f"the {name} given to {filter_name}")
        return value

    return rule


def _list(b: Budget, env: Any, value: Any, args: Args, kwargs: Kwargs) -> Any:
    if isinstance(value, Sized):
        b.check_items(len(value), "the list list makes")
    return value


FILTER_RULES: dict[str, FilterRule] = {
    "batch": _width_rule(0, "linecount", "batch"),
    "center": _width_rule(0, "width", "center"),
    "dictsort": _sortable,
    "format": _format,
    "groupby": _sortable,
    "indent": _indent,
    "join": _join,
    "list": _list,
    "pprint": _pprint,
    "replace": _replace,
    # round(5, -10**7) computes 10**(10**7) in C: 5 s, and -10**8 minutes.
    "round": _width_rule(0, "precision", "round"),
    "slice": _width_rule(0, "slices", "slice"),
    "sort": _sortable,
    "sum": _sum,
    "tojson": _tojson,
    "urlize": _urlize,
    "wordwrap": _wordwrap,
}


def check_filter(b: Budget, env: Any, name: str, value: Any, args: Args, kwargs: Kwargs) -> Any:
    """Before filter ``name`` runs; returns the value to give it (a generator may have
    been read into a list to be measured)."""
    rule = FILTER_RULES.get(name)
    if rule is not None:
        return rule(b, env, value, args, kwargs)
    if name not in LINEAR_FILTERS:
        for v in (*args, *kwargs.values()):
            b.check_width(v, f"a number given to filter {name!r}")
    return value
