"""String comparisons for deriving a call format from a template (see ``derive.py``).

Owns the small, pure helpers: common prefixes and suffixes snapped to markup
boundaries (so a derived piece never starts or ends inside a tag such as
``<|sep|>``), merging the variants of a piece into one with a
:data:`~localllm.toolcalls.tagged.WILD` where they differ (``index="1"`` and
``index="2"``), and finding the JSON values in a text.
"""

from __future__ import annotations

import json
from typing import Any

from localllm.toolcalls.jsonscan import json_end
from localllm.toolcalls.tagged import WILD

_OPENERS = "<[{("
_CLOSERS = ">]})"


def boundary(text: str, at: int) -> bool:
    """Whether a piece of markup may start or end at ``at``: the text's ends, or where a
    tag, a bracket or whitespace begins or ended."""
    if at <= 0 or at >= len(text):
        return True
    return (
        text[at] in _OPENERS
        or text[at].isspace()
        or text[at - 1] in _CLOSERS
        or text[at - 1].isspace()
    )


def common_prefix(a: str, b: str) -> str:
    """The longest common prefix of ``a`` and ``b`` that ends on a boundary of both."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    while n > 0 and not (boundary(a, n) and boundary(b, n)):
        n -= 1
    return a[:n]


def common_suffix(a: str, b: str) -> str:
    """The longest common suffix of ``a`` and ``b`` that starts on a boundary of both."""
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    while n > 0 and not (boundary(a, len(a) - n) and boundary(b, len(b) - n)):
        n -= 1
    return a[len(a) - n :]


def raw_prefix_len(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def raw_suffix_len(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


def merge(*variants: str) -> str | None:
    """One piece for texts that should be the same markup: the text itself when they
    agree, else their common head and tail around a :data:`WILD`; None when the part
    that differs is too long or spans lines to be an index or an attribute."""
    first = variants[0]
    if all(v == first for v in variants):
        return first
    head = min((raw_prefix_len(first, v) for v in variants[1:]), default=0)
    tail = min((raw_suffix_len(first[head:], v[head:]) for v in variants[1:]), default=0)
    for v in variants:
        middle = v[head : len(v) - tail]
        if len(middle) > 64 or "\n" in middle:
            return None
    return first[:head] + WILD + first[len(first) - tail :]


def json_values(text: str) -> list[tuple[int, int, Any]]:
    """Every JSON object or array in ``text``: (start, end, value), outermost first."""
    out = []
    for i, c in enumerate(text):
        if c not in "{[":
            continue
        try:
            end = json_end(text, i)
        except ValueError:
            continue
        if end is None:
            continue
        try:
            out.append((i, end, json.loads(text[i:end])))
        except ValueError:
            continue
    out.sort(key=lambda v: (v[0], -v[1]))
    return out
