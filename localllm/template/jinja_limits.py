"""What one Jinja chat-template render may spend, and the errors a template gets past it.

A chat template inside a GGUF is untrusted code.  ``Budget`` is one render's
allowance, checked by the sandbox's hooks (``jinja_env``) and the rules for
filters (``jinja_filters``), methods and operators (``jinja_rules``):

- time: a deadline, checked at each of the template's steps (loop iterations,
  attribute and item lookups, calls, operators) and, inside filters and methods,
  by a profile hook, so that a slow filter is stopped from inside;
- size: no value a template builds or hands to a filter, method or operator may
  exceed ``MAX_VALUE_CHARS`` characters or ``MAX_VALUE_ITEMS`` items, or nest deeper
  than ``MAX_DEPTH``.  Items are counted each time they appear, so a list holding
  one big list a thousand times weighs a thousand of it: that is the work its
  ``repr``, ``tojson`` or ``==`` would do, all of it in C where no deadline reaches;
- totals: loop iterations, ``range()`` lengths and text written by ``{{ }}``
  anywhere (macros and set blocks included).

A limit hit raises ``TemplateLimitError`` (an ``InvalidRequest``: HTTP 400) whose
message starts with "chat template limit:" and names the limit.
"""

from __future__ import annotations

import json
import os
import re
import string
import sys
import textwrap
from collections.abc import Callable, ItemsView, KeysView, ValuesView
from time import monotonic
from types import FrameType
from typing import Any, NoReturn

import jinja2
import markupsafe
from jinja2.utils import Namespace

from localllm.errors import InvalidRequest

# The largest real template (gpt-oss) is 16.7 KB.  Jinja ends a compile with one call of
# Python's compile() over the generated module, the lock held throughout: 206 ms for a
# 250 KB template, ~50 ms at this cap.
MAX_TEMPLATE_CHARS = 64 << 10
MAX_OUTPUT_CHARS = 4 << 20  # the rendered prompt
MAX_VALUE_CHARS = MAX_OUTPUT_CHARS  # one value: no more text than the render may output
MAX_VALUE_ITEMS = 1 << 18  # one value's items, nested ones counted each time they appear
MAX_DEPTH = 256  # nesting of one value (JSON bodies are far shallower)
MAX_WIDTH = 1 << 16  # a width, indent or count given to a filter or method
MAX_INT_BITS = 1 << 16  # an integer a template computes
MAX_SORT_ITEMS = 1 << 16  # items one sort may order (sorting runs in C, past any deadline)
MAX_EMITTED = 4 * MAX_OUTPUT_CHARS  # text written by {{ }} in all, macros and set blocks too
MAX_LOOP_ITERATIONS = 1_000_000  # iterations of all loops of one render
MAX_RANGE_TOTAL = 1_000_000  # lengths of all range() of one render
RENDER_SECONDS = 2.0
_MEMO_ITEMS = 1 << 20  # items of the containers whose size is remembered (kept alive)

# Where the profile hook may stop a render: template code, Jinja, MarkupSafe, this
# package, and the standard modules filters run in.  Never elsewhere (logging or
# threading code stopped half-way could keep a lock).
_STOPPABLE = tuple(
    [os.path.dirname(m.__file__ or "") + os.sep for m in (jinja2, markupsafe)]
    + [
        os.path.dirname(__file__) + os.sep,
        "<template>",
        os.path.dirname(json.__file__) + os.sep,
        os.path.dirname(re.__file__) + os.sep,
    ]
    + [m.__file__ or "<none>" for m in (textwrap, string)]
    + [
        os.path.join(os.path.dirname(textwrap.__file__ or ""), f)
        for f in ("pprint.py", "random.py", os.path.join("urllib", "parse.py"))
    ]
)


class TemplateError(InvalidRequest):
    """The chat template could not be rendered (bad syntax, raise_exception, or a limit hit)."""


class TemplateLimitError(TemplateError):
    """The chat template went past one of the limits of a render (time, size, loops), or
    tried what the sandbox forbids: a hostile template, not one that refuses its input."""


class Deadline(BaseException):
    """The render ran past its deadline.  A BaseException, so that no ``except Exception``
    in filter code swallows it; the render turns it into a TemplateLimitError."""


class _TooBig(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


Size = tuple[int, int, int]  # items, characters, depth


def limit_message(what: str) -> str:
    return f"chat template limit: {what}"


def shorten(text: str, limit: int = 1000) -> str:
    """Error text as a client gets it: a template's message can be made of anything."""
    return text if len(text) <= limit else text[:limit] + "..."


class Budget:
    """One render's allowance (see the module docstring); ``armed`` while it runs."""

    def __init__(self, seconds: float = RENDER_SECONDS) -> None:
        self.seconds = seconds
        self.deadline = monotonic() + seconds
        self.armed = False
        self.range_left = MAX_RANGE_TOTAL
        self.loops_left = MAX_LOOP_ITERATIONS
        self.emitted = 0
        self.failure: TemplateLimitError | None = None
        # id -> (size, the object, kept alive so that its id is not reused)
        self._memo: dict[int, tuple[Size, Any]] = {}
        self._memo_items = 0
        self._steps = 0
        self.inside = False  # within a call that ``run`` watches

    # -- time ------------------------------------------------------------------------
    def arm(self) -> None:
        self.armed = True

    def disarm(self) -> None:
        self.armed = False
        self._memo.clear()

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)`` with the deadline watched inside it: the template's
        own steps tick, but a filter or method runs code of its own, where only a profile
        hook sees time pass.  (Set per call: over a whole render it costs 5 times the
        render.)"""
        if self.inside or not self.armed:
            return func(*args, **kwargs)
        saved = sys.getprofile()
        self.inside = True
        sys.setprofile(self._profile)
        try:
            return func(*args, **kwargs)
        finally:
            self.inside = False  # before any call: the hook lets the next one through
            sys.setprofile(saved)

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if (
            self.inside
            and event[-4:] == "call"
            and monotonic() > self.deadline
            and frame.f_code.co_filename.startswith(_STOPPABLE)
        ):
            raise Deadline

    def tick(self) -> None:
        if self.armed and monotonic() > self.deadline:
            raise Deadline

    def deadline_error(self) -> TemplateLimitError:
        return TemplateLimitError(limit_message(f"rendering took longer than {self.seconds:g} s"))

    # -- failures --------------------------------------------------------------------
    def fail(self, what: str) -> NoReturn:
        """Raise a limit error, remembered so that code which swallows it cannot hide it."""
        exc = TemplateLimitError(limit_message(what))
        if self.failure is None:
            self.failure = exc
        raise exc

    def reraise(self) -> None:
        if self.failure is not None:
            raise self.failure

    # -- totals ----------------------------------------------------------------------
    def take_range(self, length: int) -> None:
        if length > self.range_left:
            self.fail(f"range() lengths add up to more than {MAX_RANGE_TOTAL:,}")
        self.range_left -= length

    def take_iteration(self) -> None:
        self.loops_left -= 1
        if self.loops_left < 0:
            self.fail(f"loops ran more than {MAX_LOOP_ITERATIONS:,} times in all")

    def take_emitted(self, chars: int) -> None:
        self.emitted += chars
        if self.armed and self.emitted > MAX_EMITTED:
            self.fail(
                f"more than {MAX_EMITTED:,} characters written by {{{{ }}}} in all "
                "(macros and set blocks included)"
            )

    # -- sizes -----------------------------------------------------------------------
    def size(self, obj: Any, what: str) -> Size:
        """``obj``'s size; a limit error naming ``what`` if it is past a limit for one value."""
        try:
            items, chars, depth, _ = self._measure(obj, 0, set())
        except _TooBig as exc:
            self.fail(f"{what} {exc.what}")
        return items, chars, depth

    def check_width(self, value: Any, what: str) -> None:
        """A width, indent or count (an int, or a string used as an indent)."""
        n = len(value) if isinstance(value, str) else value
        if isinstance(n, int) and abs(n) > MAX_WIDTH:
            self.fail(f"{what} is {n:,}; at most {MAX_WIDTH:,}")

    def check_chars(self, chars: int, what: str) -> None:
        if chars > MAX_VALUE_CHARS:
            self.fail(f"{what} would be longer than {MAX_VALUE_CHARS:,} characters")

    def check_items(self, items: int, what: str) -> None:
        if items > MAX_VALUE_ITEMS:
            self.fail(f"{what} would hold more than {MAX_VALUE_ITEMS:,} items")

    def _measure(self, obj: Any, depth: int, path: set[int]) -> tuple[int, int, int, bool]:
        """(items, characters, depth, volatile): volatile values hold a namespace, whose
        contents may change, so their size is not remembered."""
        if isinstance(obj, (str, bytes)):
            if len(obj) > MAX_VALUE_CHARS:
                raise _TooBig(f"is longer than {MAX_VALUE_CHARS:,} characters")
            return 1, len(obj), 0, False
        if isinstance(obj, int):
            if obj.bit_length() > MAX_INT_BITS:
                raise _TooBig(f"is an integer of more than {MAX_INT_BITS:,} bits")
            return 1, obj.bit_length() // 3 + 1, 0, False
        volatile = False
        if isinstance(obj, Namespace):
            children: Any = object.__getattribute__(obj, "_Namespace__attrs").items()
            volatile = True
        elif isinstance(obj, (list, tuple, dict, set, frozenset)):
            children = obj.items() if isinstance(obj, dict) else obj
        elif isinstance(obj, (KeysView, ValuesView, ItemsView)):
            # Made afresh at each access: measured through, never remembered.
            children, volatile = obj, True
        else:
            return 1, 16, 0, False  # None, numbers, loop, macro, undefined, generators...
        key = id(obj)
        known = self._memo.get(key)
        if known is not None:
            return (*known[0], False)
        if key in path:
            return 1, 5, 0, True  # a cycle (through a namespace): printed as [...]
        if depth >= MAX_DEPTH:
            raise _TooBig(f"is nested more than {MAX_DEPTH} levels deep")
        path.add(key)
        items, chars, deepest = 1, 2, 0
        pairs = isinstance(children, ItemsView)
        for child in children:
            self._steps += 1
            if not self._steps % 4096:  # a walk of 262,144 items takes a while
                self.tick()
            for part in child if pairs else (child,):
                i, c, d, v = self._measure(part, depth + 1, path)
                items += i
                chars += c + 2
                deepest = max(deepest, d)
                volatile = volatile or v
            if items > MAX_VALUE_ITEMS:
                raise _TooBig(
                    f"holds more than {MAX_VALUE_ITEMS:,} items "
                    "(nested ones counted each time they appear)"
                )
            if chars > MAX_VALUE_CHARS:
                raise _TooBig(f"is longer than {MAX_VALUE_CHARS:,} characters as text")
        path.discard(key)
        if deepest + depth >= MAX_DEPTH:  # (remembered parts were not walked again)
            raise _TooBig(f"is nested more than {MAX_DEPTH} levels deep")
        size = (items, chars, deepest + 1)
        if not volatile and self._memo_items + len(obj) <= _MEMO_ITEMS:
            self._memo[key] = (size, obj)
            self._memo_items += len(obj)
        return (*size, volatile)
