"""Calls written as tagged text: a name between markup pieces, then JSON or tagged arguments.

Most families since 2025 write a call this way; they differ only in the markup::

    <minimax:tool_call>                               section (optional, around all calls)
    <invoke name="get_time">                          call open, the name, name end
    <parameter name="city">Paris</parameter>          one element per argument ...
    </invoke>                                         call close
    </minimax:tool_call>

    <function=get_time>{"city": "Paris"}</function>   ... or the arguments as JSON

A :class:`Shape` names the pieces; :class:`Tagged` reads calls in it.  Dedicated
formats (MiniMax-M2, DeepSeek V3.2's DSML, Kimi K3, MiniCPM5, Functionary v3.1)
give their pieces by hand, the template-derived format (``derive.py``) computes
them from a chat template.  A piece matches leniently: any whitespace in it
matches any whitespace (none included), :data:`WILD` matches a short varying run
(an index, a type attribute) and :data:`IDENT` the call's id, which is kept.
Argument values are text typed by the tool's schema (``ToolSet.typed``); a
``<![CDATA[..]]>`` value is taken literally.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Step,
    Syntax,
    ToolSet,
    read_calls,
    read_json,
    to_close,
    typed_value,
)

WILD = "\x00"  # a short varying run: an index, a type attribute
IDENT = "\x01"  # the call's id
_MAX_WILD = 64
_MAX_ID = 128
_CDATA, _CDATA_END = "<![CDATA[", "]]>"
_SPLIT = re.compile(r"(\s+|\x00|\x01)")
_TAG = re.compile(r"<[^<>\s]{1,64}>|\[[^\[\]\s]{1,64}\]")


def marker_like(token: str) -> bool:
    """Whether a markup token is a marker (removed from content) rather than punctuation
    such as ``">`` or ``name="`` that prose uses too."""
    return len(token) >= 3 and (
        (token[0] in "<[" and token[-1] in ">]") or "|" in token or "｜" in token
    )


class Piece:
    """One literal piece of markup, matched leniently (see the module docstring)."""

    def __init__(self, text: str) -> None:
        self.text = text
        rx = [r"\s*"]
        for part in _SPLIT.split(text):
            if not part:
                continue
            if part == WILD:
                rx.append(rf"[^\n]{{0,{_MAX_WILD}}}?")
            elif part == IDENT:
                rx.append(rf"(?P<id>[^\s<>\"']{{1,{_MAX_ID}}}?)")
            elif part.isspace():
                rx.append(r"\s*")
            else:
                rx.append(re.escape(part))
        self._rx = re.compile("".join(rx), re.S)
        self.tokens = tuple(
            t for t in _SPLIT.split(text) if t and not t.isspace() and t not in (WILD, IDENT)
        )
        head = re.split(r"[\x00\x01]", text)[0]
        self._head = "".join(head.split())
        self._exact = WILD not in text and IDENT not in text
        self.lead = text[: len(text) - len(text.lstrip())]  # whitespace it opens with
        self.trail = text[len(text.rstrip()) :]  # ... and ends with

    @property
    def empty(self) -> bool:
        return not self.tokens

    @property
    def first(self) -> str:
        return self.tokens[0] if self.tokens else ""

    def match(self, text: str, at: int, final: bool) -> tuple[int, str | None] | int | None:
        """(end, id) when the piece is at ``at`` (after whitespace); None while it may
        still be arriving; -1 when something else is there."""
        m = self._rx.match(text, at)
        if m:
            return m.end(), m.groupdict().get("id")
        if final:
            return -1
        rest = "".join(text[at:].split())
        if self._head.startswith(rest):
            return None
        if (
            not self._exact
            and rest.startswith(self._head)
            and len(text) - at <= len(self.text) + _MAX_ID + _MAX_WILD
        ):
            return None
        return -1

    def find(self, text: str, start: int) -> int:
        """Where the piece's first token next occurs from ``start``; -1 if not yet."""
        return text.find(self.first, start) if self.tokens else -1


@dataclass(frozen=True)
class Shape:
    """The markup pieces of a tagged call format (see the module docstring)."""

    call_open: str
    name_end: str
    call_close: str
    section_open: str = ""
    section_close: str = ""
    json_args: bool = True
    param_open: str = ""  # XML-style arguments: before a key,
    key_end: str = ""  # between the key and its value,
    param_close: str = ""  # after the value
    extra_markers: tuple[str, ...] = ()  # markup of the family that is not a call's

    def pieces(self) -> tuple[str, ...]:
        return (
            self.section_open,
            self.section_close,
            self.call_open,
            self.name_end,
            self.call_close,
            self.param_open,
            self.key_end,
            self.param_close,
        )

    @cached_property
    def markers(self) -> tuple[str, ...]:
        """The markup's marker tokens, and the tags they are made of (each may be one
        control token of the vocabulary)."""
        tokens = [t for p in self.pieces() for t in Piece(p).tokens if marker_like(t)]
        tags = [tag for t in tokens for tag in _TAG.findall(t) if tag != t]
        return tuple(dict.fromkeys([*tokens, *self.extra_markers, *tags]))


def invoke_shape(prefix: str, section: str, key_end: str = '">') -> Shape:
    """The invoke/parameter markup of MiniMax-M2, DeepSeek's DSML and Muse, every tag name
    behind ``prefix``: ``<{p}{section}><{p}invoke name="f"><{p}parameter name="k">v``
    ``</{p}parameter></{p}invoke></{p}{section}>``."""
    return Shape(
        section_open=f"<{prefix}{section}>",
        section_close=f"</{prefix}{section}>",
        call_open=f'<{prefix}invoke name="',
        name_end='">',
        call_close=f"</{prefix}invoke>",
        json_args=False,
        param_open=f'<{prefix}parameter name="',
        key_end=key_end,
        param_close=f"</{prefix}parameter>",
    )


class Tagged(Syntax):
    """A :class:`~localllm.toolcalls.base.Syntax` for one :class:`Shape`."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.sec_open, self.sec_close = Piece(shape.section_open), Piece(shape.section_close)
        self.call_open, self.name_end = Piece(shape.call_open), Piece(shape.name_end)
        self.call_close = Piece(shape.call_close)
        self.param_open, self.key_end = Piece(shape.param_open), Piece(shape.key_end)
        self.param_close = Piece(shape.param_close)
        firsts = (self.sec_open.first, self.call_open.first)
        self.starts = tuple(dict.fromkeys(f for f in firsts if f))
        self.markers = shape.markers
        self.strip = tuple(m for m in shape.markers if marker_like(m))

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        at, section = 0, False
        if not self.sec_open.empty:
            got = self.sec_open.match(text, 0, final)
            if got is None:
                return None
            if isinstance(got, tuple):
                at, section = got[0], True
        read = read_calls(
            text,
            at,
            final,
            lambda at: self._call(text, at, tools, final),
            lambda why: self._broken(text, final, why, section),
            many=section,
        )
        if not isinstance(read, tuple):
            return read
        calls, at = read
        if not calls:
            return self._broken(text, final, "no call in the section", section)
        if section and not self.sec_close.empty:
            close = self.sec_close.match(text, at, final)
            if close is None:
                return None
            if isinstance(close, tuple):
                at = close[0]
        return Attempt(at, calls)

    def _broken(self, text: str, final: bool, why: str, section: bool) -> Attempt | None:
        close = (self.sec_close if section else self.call_close).first
        if not close:
            return Attempt(len(text) if final else 1, None, why)
        return to_close(text, 1, close, final, why)

    def _call(self, text: str, at: int, tools: ToolSet | None, final: bool) -> Step:
        """One call from ``at`` (see :data:`~localllm.toolcalls.base.Step`)."""
        opened = self.call_open.match(text, at, final)
        if not isinstance(opened, tuple):
            return opened
        at, ident = opened
        stop = self._name_stop(text, at)
        if stop < 0:
            if len(text) - at > MAX_NAME + 2 * _MAX_WILD:
                return "no function name"
            return None
        name = text[at:stop].strip()
        if not name or len(name) > MAX_NAME or "\n" in name or "<" in name:
            return "no function name"
        got = self.name_end.match(text, stop, final)
        if not isinstance(got, tuple):
            return None if got is None else "no function name"
        at, ident = got[0], ident or got[1]
        if self.shape.json_args:
            read = read_json(text, at, final, self.scan)
            if read is None:
                return None
            if isinstance(read, Attempt):
                return read.why
            args, at = read
        else:
            params = self._params(text, at, tools, name, final)
            if params is None or isinstance(params, str):
                return params
            args, at = params
        close = self.call_close.match(text, at, final)
        if close is None:
            return None
        if isinstance(close, tuple):
            at = close[0]
            ident = ident or close[1]
        elif text[at:].strip():
            return "text inside the call"
        return RawCall(name, args, ident), at

    def _name_stop(self, text: str, at: int) -> int:
        if not self.name_end.empty:
            return self.name_end.find(text, at)
        # The name ends at a newline or at what follows it.
        ends = [text.find("\n", at), self.call_close.find(text, at)]
        ends.append(text.find("{", at) if self.shape.json_args else self.param_open.find(text, at))
        found = [e for e in ends if e >= 0]
        return min(found) if found else -1

    def _params(
        self, text: str, at: int, tools: ToolSet | None, name: str, final: bool
    ) -> tuple[JSONObject, int] | str | None:
        args: JSONObject = {}
        while True:
            opened = self.param_open.match(text, at, final)
            if opened is None:
                return None
            if opened == -1 or not isinstance(opened, tuple):
                return args, at
            start = opened[0]
            key_stop = self.key_end.find(text, start)
            if key_stop < 0:
                return None if len(text) - start <= MAX_NAME else "no argument name"
            key = text[start:key_stop].strip()
            got = self.key_end.match(text, key_stop, final)
            if not isinstance(got, tuple):
                return None if got is None else "no argument name"
            value = self._value(text, got[0])
            if value is None:
                return "unterminated argument" if final else None
            raw, stop = value
            closed = self.param_close.match(text, stop, final)
            if not isinstance(closed, tuple):
                return None if closed is None else "unterminated argument"
            if not key or len(key) > MAX_NAME:
                return "no argument name"
            args[key] = raw if isinstance(raw, _Literal) else typed_value(tools, name, key, raw)
            at = closed[0]

    def _value(self, text: str, start: int) -> tuple[str, int] | None:
        """The argument's text from ``start`` and where its close piece begins."""
        body = start + len(text[start:]) - len(text[start:].lstrip())
        if text.startswith(_CDATA, body):
            end = text.find(_CDATA_END, body)
            if end < 0:
                return None
            return _Literal(text[body + len(_CDATA) : end]), end + len(_CDATA_END)
        stop = self.param_close.find(text, start)
        if stop < 0:
            return None
        raw = text[start:stop]
        # The whitespace the pieces write around a value is theirs, not the value's.
        trail, lead = self.key_end.trail, self.param_close.lead
        raw = raw[len(trail) :] if trail and raw.startswith(trail) else raw
        raw = raw[: len(raw) - len(lead)] if lead and raw.endswith(lead) else raw
        return raw, stop


class _Literal(str):
    """A CDATA value: text as written, never read as JSON."""

    __slots__ = ()
