"""Request bodies as JSON, parsed in bounded steps: linear in size, capped in depth and values.

The daemon parses bodies in a worker thread, but a C call such as ``json.loads``
holds the interpreter lock for as long as it runs, and with it the event loop:
``json.loads`` of a 64 MiB body takes 0.1 s for one long string and 9 s for
``[[],[],…]`` (every empty list an allocation, and the collector walking them).
So no single C call here sees more than ``SLICE`` bytes:

* a body up to ``SMALL`` bytes is decoded as UTF-8 and goes to ``json.loads`` in
  one call (at most ~10 ms for the worst shape that fits), after a linear
  pre-scan of its depth and of how many values and containers it holds;
* a larger body goes through ``_Parser``: structure is walked in Python (the
  lock is handed over between steps), and every string, however long, is
  matched and decoded a slice at a time.

Both paths refuse nesting deeper than ``MAX_DEPTH`` (the recursive consumers of
a parsed body, JSON schema to grammar among them, stay inside Python's stack)
and more than ``MAX_VALUES`` values or ``MAX_CONTAINERS`` objects and arrays
(what a parse, the validation after it and the garbage collector's walks cost is
proportional to those), each with an ``InvalidRequest`` naming the limit.

Bodies are strict UTF-8 (RFC 8259: JSON exchanged between systems is UTF-8),
with no byte order mark.  ``json.loads`` of bytes would guess UTF-16 or UTF-32
from the first bytes, while the pre-scan reads bytes as UTF-8: a UTF-16 body
whose text holds a character with a ``"`` byte (U+0122 is ``22 01``) hid its
brackets from the depth scan.  So neither path guesses: anything but UTF-8 is an
``InvalidRequest`` saying so.
"""

from __future__ import annotations

import codecs
import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

from localllm.errors import InvalidRequest

# Real requests (chat messages, tool schemas, ``format`` schemas) stay far below this;
# it leaves the recursive consumers of a parsed body well inside Python's stack.
MAX_DEPTH = 100
# A million values is a 1M-token ``context`` or ``prompt`` array, far beyond any chat;
# the worst shape of that many (small objects) parses and validates in ~1 s of a worker
# thread, handing the lock back between values.
MAX_VALUES = 1_000_000
# Objects and arrays are what costs: the garbage collector walks them (a full collection
# over a million holds the lock for ~50 ms, whichever thread triggers it), and pydantic
# validates a list of models in one call (50,000 chat messages: 68 ms on a 2-core EPYC).
# 30,000 is some 10,000 messages with their content parts.  Small bodies are held to it
# too (``SMALL`` bytes hold ~87,000 empty ones), so one limit holds at every size.
MAX_CONTAINERS = 30_000
SMALL = 256 << 10
SLICE = 1 << 20

_WS = re.compile(rb"[ \t\n\r]*")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
# The longest run of a JSON string's body that ends at a character boundary: plain bytes
# (control characters excluded, as ``json.loads`` does) or whole escapes.  Possessive,
# so a failed match never backtracks.
_RUN = re.compile(rb'(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+')
_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_LITERALS = (
    (b"true", True),
    (b"false", False),
    (b"null", None),
    (b"NaN", float("nan")),
    (b"Infinity", float("inf")),
    (b"-Infinity", float("-inf")),
)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
# Any byte order mark (RFC 8259: none is to be added) is refused; UTF-32's start with
# UTF-16's.  Without one, a NUL among the first four bytes is how ``json.detect_encoding``
# tells UTF-16 or UTF-32 (JSON text starts with ASCII).
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def deep_error() -> InvalidRequest:
    return InvalidRequest(f"invalid JSON in request body: nested deeper than {MAX_DEPTH} levels")


def not_utf8(why: str) -> InvalidRequest:
    return InvalidRequest(
        f"invalid JSON in request body: not UTF-8 ({why}); send JSON as UTF-8 (RFC 8259)"
    )


def check_encoding(raw: bytes) -> None:
    """Refuse a body that announces another encoding than plain UTF-8 in its first bytes."""
    if raw.startswith(_BOMS):
        raise not_utf8("it starts with a byte order mark")
    if b"\x00" in raw[:4]:
        raise not_utf8("it looks like UTF-16 or UTF-32")


def loads(raw: bytes) -> Any:
    """``raw`` parsed as JSON within the limits; any failure is an ``InvalidRequest``."""
    check_encoding(raw)
    if len(raw) > SMALL:
        return _Parser(raw).parse()
    try:
        # Strict: no surrogates encoded as UTF-8 (``json.loads`` of bytes lets them in).
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(f"{exc.reason} at byte {exc.start}") from None
    check_small(raw)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"invalid JSON in request body: {exc}") from None


def check_small(raw: bytes) -> None:
    """The large path's limits, for a body ``json.loads`` reads whole (UTF-8 ``raw``).

    Counted on the bytes outside strings, in linear passes: containers are the
    ``[`` and ``{``; values (what ``_Parser`` counts: the top one, each array
    element, each member's value) are one plus the commas plus the non-empty
    containers, each of whose k items is k - 1 commas.  A body too malformed
    for these counts to mean anything fails in ``json.loads`` right after."""
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= MAX_DEPTH and brackets <= MAX_CONTAINERS:
        if 1 + raw.count(b",") + brackets <= MAX_VALUES:
            return  # within every limit whatever the strings hold: skip the scan
    outside = _outside_strings(raw)
    if _deepest(outside, MAX_DEPTH) > MAX_DEPTH:
        raise deep_error()
    containers = outside.count(b"[") + outside.count(b"{")
    if containers > MAX_CONTAINERS:
        raise too_many_containers()
    tight = outside.translate(None, b" \t\n\r")
    empty = tight.count(b"[]") + tight.count(b"{}")
    if 1 + tight.count(b",") + containers - empty > MAX_VALUES:
        raise too_many_values()


def too_many_values() -> InvalidRequest:
    return InvalidRequest(f"invalid JSON in request body: more than {MAX_VALUES} values")


def too_many_containers() -> InvalidRequest:
    return InvalidRequest(
        f"invalid JSON in request body: more than {MAX_CONTAINERS} objects and arrays"
    )


def _outside_strings(raw: bytes) -> bytes:
    """``raw`` with each string replaced by ``0``: escape pairs are blanked (``\\\\``
    first, then ``\\"``, which is how a left-to-right reader pairs them) and the text
    is split on the quotes left; the even pieces are outside strings."""
    plain = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    return b"0".join(plain.split(b'"')[::2])


def _deepest(outside: bytes, stop_after: int) -> int:
    brackets = outside.translate(None, _NOT_BRACKET)
    depth = deepest = 0
    for c in brackets:
        if c in b"[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_after:
                    break
        else:
            depth -= 1
    return deepest


def json_depth(raw: bytes, stop_after: int = MAX_DEPTH) -> int:
    """Deepest ``[``/``{`` nesting in UTF-8 ``raw``, brackets inside strings not counted.

    Linear: only the text outside strings (``_outside_strings``) is searched for
    brackets, and the walk over them stops once ``stop_after`` is passed.
    """
    if raw.count(b"[") + raw.count(b"{") <= stop_after:
        return 0  # cannot be deeper than the limit: skip the scan
    return _deepest(_outside_strings(raw), stop_after)


class _Parser:
    """A JSON reader over bytes with an explicit stack (no recursion, no long C calls)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.n = len(raw)
        self.values = 0
        self.containers = 0

    def fail(self, what: str, pos: int) -> InvalidRequest:
        return InvalidRequest(f"invalid JSON in request body: {what} at byte {pos}")

    def ws(self, pos: int) -> int:
        m = _WS.match(self.raw, pos)
        assert m is not None  # the pattern matches the empty string
        return m.end()

    def count(self) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise too_many_values()

    def parse(self) -> Any:
        raw, n = self.raw, self.n
        # Each frame: [container, key of the member being read (objects)].
        stack: list[list[Any]] = []
        pos = self.ws(0)  # a byte order mark was refused by check_encoding
        while True:
            if pos >= n:
                raise self.fail("unexpected end", pos)
            c = raw[pos]
            self.count()
            if c == 0x7B or c == 0x5B:  # { or [
                if len(stack) >= MAX_DEPTH:
                    raise deep_error()
                self.containers += 1
                if self.containers > MAX_CONTAINERS:
                    raise too_many_containers()
                container: dict[str, Any] | list[Any] = {} if c == 0x7B else []
                pos = self.ws(pos + 1)
                if pos < n and raw[pos] == c + 2:  # } or ]: empty
                    value: Any = container
                    pos += 1
                else:
                    stack.append([container, None])
                    if c == 0x7B:
                        stack[-1][1], pos = self.key(pos)
                    continue
            elif c == 0x22:  # "
                value, pos = self.string(pos + 1)
            else:
                value, pos = self.scalar(pos)
            # Attach the value; close every container that ends here.
            while True:
                if not stack:
                    pos = self.ws(pos)
                    if pos != n:
                        raise self.fail("extra data", pos)
                    return value
                frame = stack[-1]
                parent = frame[0]
                if isinstance(parent, list):
                    parent.append(value)
                else:
                    parent[frame[1]] = value
                pos = self.ws(pos)
                if pos >= n:
                    raise self.fail("unexpected end", pos)
                if raw[pos] == 0x2C:  # ,
                    pos = self.ws(pos + 1)
                    if isinstance(parent, dict):
                        frame[1], pos = self.key(pos)
                    break
                if raw[pos] != (0x5D if isinstance(parent, list) else 0x7D):
                    raise self.fail("expecting ',' or the container's end", pos)
                stack.pop()
                value = parent
                pos += 1

    def key(self, pos: int) -> tuple[str, int]:
        if pos >= self.n or self.raw[pos] != 0x22:
            raise self.fail("expecting a property name in double quotes", pos)
        key, pos = self.string(pos + 1)
        pos = self.ws(pos)
        if pos >= self.n or self.raw[pos] != 0x3A:  # :
            raise self.fail("expecting ':'", pos)
        return key, self.ws(pos + 1)

    def scalar(self, pos: int) -> tuple[Any, int]:
        raw = self.raw
        for word, value in _LITERALS:
            if raw.startswith(word, pos):
                return value, pos + len(word)
        m = _NUMBER.match(raw, pos)
        if m is None:
            raise self.fail("expecting a value", pos)
        try:
            if m.group(1) or m.group(2):
                return float(m.group()), m.end()
            return int(m.group()), m.end()
        except ValueError as exc:  # more digits than int() converts
            raise self.fail(str(exc), pos) from None

    def string(self, pos: int) -> tuple[str, int]:
        """The string whose body starts at ``pos``, decoded a slice at a time."""
        raw, n = self.raw, self.n
        parts: list[str] = []
        while True:
            # Room for a whole surrogate pair's escapes, however small the slice.
            limit = min(n, pos + max(SLICE, 12))
            m = _RUN.match(raw, pos, limit)
            assert m is not None
            end = m.end()
            closed = end < n and raw[end] == 0x22
            if not closed:
                if end == limit and limit < n:
                    # Cut by the slice: end on a whole UTF-8 character.
                    while end > pos and 0x80 <= raw[end] < 0xC0:
                        end -= 1
                elif not (end < n and _ESCAPE.match(raw, end)):
                    # Not an escape straddling the slice's end: a bad byte or the end.
                    raise self.fail("invalid or unterminated string", end)
            chunk = raw[pos:end]
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise not_utf8(f"{exc.reason} at byte {pos + exc.start}") from None
            if b"\\" in chunk:
                text = scanstring(text + '"', 0)[0]
                if not closed and text and "\ud800" <= text[-1] <= "\udbff":
                    # A surrogate pair cut in two: read its first half again with the rest.
                    text, end = text[:-1], end - 6
            if closed:
                if not parts:
                    return text, end + 1
                parts.append(text)
                return "".join(parts), end + 1
            if end == pos:
                raise self.fail("invalid string", pos)
            parts.append(text)
            pos = end
