"""Request bodies as JSON, parsed in bounded steps: linear in size, capped in depth and values.

The daemon parses bodies in a worker thread, but a C call such as ``json.loads``
holds the interpreter lock for as long as it runs, and with it the event loop:
``json.loads`` of a 64 MiB body takes 0.1 s for one long string and 9 s for
``[[],[],…]`` (every empty list an allocation, and the collector walking them).
So no single C call here sees more than ``SLICE`` bytes:

* a body up to ``SMALL`` bytes goes to ``json.loads`` in one call (at most
  ~10 ms for the worst shape that fits), after a linear pre-scan of its depth;
* a larger body goes through ``_Parser``: structure is walked in Python (the
  lock is handed over between steps), and every string, however long, is
  matched and decoded a slice at a time.

Both paths refuse nesting deeper than ``MAX_DEPTH`` (the recursive consumers of
a parsed body, JSON schema to grammar among them, stay inside Python's stack)
and more than ``MAX_VALUES`` values or ``MAX_CONTAINERS`` objects and arrays
(what a parse, the validation after it and the garbage collector's walks cost is
proportional to those), each with an ``InvalidRequest`` naming the limit.
"""

from __future__ import annotations

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
# 30,000 is some 10,000 messages with their content parts.  (A body of ``SMALL`` bytes
# holds at most ~87,000 empty ones, which validate as fast as they parse.)
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


def deep_error() -> InvalidRequest:
    return InvalidRequest(f"invalid JSON in request body: nested deeper than {MAX_DEPTH} levels")


def loads(raw: bytes) -> Any:
    """``raw`` parsed as JSON within the limits; any failure is an ``InvalidRequest``."""
    if len(raw) <= SMALL:
        if json_depth(raw) > MAX_DEPTH:
            raise deep_error()
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise InvalidRequest(f"invalid JSON in request body: {exc}") from None
    return _Parser(raw).parse()


def json_depth(raw: bytes, stop_after: int = MAX_DEPTH) -> int:
    """Deepest ``[``/``{`` nesting in ``raw``, brackets inside strings not counted.

    Linear: escape pairs are blanked (``\\\\`` first, then ``\\"``, which is how a
    left-to-right reader pairs them), the text is split on the quotes left, and
    only the even pieces (outside strings) are searched for brackets.  The walk
    over the brackets stops once ``stop_after`` is passed.
    """
    if raw.count(b"[") + raw.count(b"{") <= stop_after:
        return 0  # cannot be deeper than the limit: skip the scan
    plain = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    brackets = b"".join(plain.split(b'"')[::2]).translate(None, _NOT_BRACKET)
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
            raise InvalidRequest(f"invalid JSON in request body: more than {MAX_VALUES} values")

    def parse(self) -> Any:
        raw, n = self.raw, self.n
        # Each frame: [container, key of the member being read (objects)].
        stack: list[list[Any]] = []
        pos = self.ws(3 if raw.startswith(b"\xef\xbb\xbf") else 0)
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
                    raise InvalidRequest(
                        "invalid JSON in request body: more than "
                        f"{MAX_CONTAINERS} objects and arrays"
                    )
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
                raise self.fail(f"invalid UTF-8 ({exc.reason})", pos + exc.start) from None
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
