"""The shared vocabulary of the tool-call parsers: calls, parse results, the tools offered.

Owns :class:`ToolCall` (one parsed call, with Ollama's wire shape), :class:`Parsed`
(what one ``feed`` yields: content, thinking, calls), :class:`Attempt` and
:class:`Syntax` (the interface every marker-based format implements, see
``stream.py``), :class:`ToolSet` (the request's tools: known names and the
parameter schemas that type XML-style argument values), and small text helpers
(:func:`read_json`, :func:`expect`, :func:`partial_tag_len`, and the steps most
formats share: :func:`read_calls`, :func:`calls_region`, :func:`call_name`,
:func:`end_calls`, :func:`end_call`).  Reading JSON itself
is ``jsonscan.py``'s; its names are re-exported here, where the formats look.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from localllm.api.wire import JSONObject, JSONValue
from localllm.toolcalls.jsonscan import (
    FAILED,
    JsonScan,
    json_end,
    json_or_text,
    loads,
)

if TYPE_CHECKING:
    from localllm.api import wire

MAX_NAME = 256  # a "function name" longer than this is prose, not a call


@dataclass
class ToolCall:
    """One parsed call; ``arguments`` keeps the model's key order."""

    name: str
    arguments: JSONObject
    index: int = 0
    id: str | None = None

    def to_ollama(self) -> wire.ToolCall:
        """Ollama's wire shape (``message.tool_calls[i]``)."""
        out: wire.ToolCall = {
            "function": {"index": self.index, "name": self.name, "arguments": self.arguments}
        }
        if self.id:
            out["id"] = self.id
        return out


@dataclass
class Parsed:
    """What a parser can hand on now: shown text, reasoning, and calls that have closed."""

    content: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)

    def extend(self, other: Parsed) -> None:
        self.content += other.content
        self.thinking += other.thinking
        self.calls.extend(other.calls)


class FormatParser(Protocol):
    """A streaming parser for one output format: feed pieces, then finish once."""

    def feed(self, text: str) -> Parsed: ...

    def finish(self) -> Parsed: ...


@dataclass
class RawCall:
    """A call as a syntax read it, before the tools are checked; ``arguments`` may be a
    JSON string (some models double-encode them)."""

    name: str
    arguments: Any
    id: str | None = None


@dataclass
class Attempt:
    """The outcome of reading a call region of ``end`` characters.

    ``calls`` is None when the region is not a valid call (it becomes content; ``why``,
    when set, is logged as a warning).  An empty list means markup without a call
    (Functionary's ``>>>all`` header), consumed silently.
    """

    end: int
    calls: list[RawCall] | None
    why: str = ""


class Syntax:
    """One format's call markup, as seen by the generic streaming parser (``stream.py``)."""

    starts: tuple[str, ...] = ()  # markers that open a call region anywhere in the content
    strip: tuple[str, ...] = ()  # markup removed from content (control tokens as text)
    markers: tuple[str, ...] = ()  # every marker of the format (see ChatFormat.markers)

    @property
    def scan(self) -> JsonScan:
        """This syntax's :class:`JsonScan` (one per parser: each makes its own syntax)."""
        found = self.__dict__.get("_scan")
        if found is None:
            found = self.__dict__["_scan"] = JsonScan()
        return found

    def leading(self, text: str, first: bool) -> bool | None:
        """Whether a call region begins bare at ``text`` (the reply's start when ``first``,
        else right after a call); None while undecided."""
        return False

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        """Read the region at the start of ``text``; None while more text is needed
        (never when ``final``)."""
        raise NotImplementedError


class ToolSet:
    """The tools a request offered: names a call may use, and their parameter schemas."""

    def __init__(self, tools: Sequence[JSONObject]) -> None:
        self.params: dict[str, Mapping[str, JSONValue]] = {}
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, Mapping) else None
            name = fn.get("name") if isinstance(fn, Mapping) else None
            if isinstance(fn, Mapping) and isinstance(name, str):
                params = fn.get("parameters")
                self.params[name] = params if isinstance(params, Mapping) else {}

    def known(self, name: str) -> bool:
        return name in self.params

    def typed(self, name: str, key: str, raw: str) -> Any:
        """An XML-style argument's text as the value its schema asks for.

        A string-typed parameter keeps the text as written (``"1"`` stays a string);
        one that may be a string or something else (``["string", "integer"]``) is that
        something else when the text reads as one (``42``, ``{"a": 1}``), else the text;
        any other or unknown type is read as JSON when it parses, else kept as text.
        """
        props = self.params.get(name, {}).get("properties")
        schema = props.get(key) if isinstance(props, Mapping) else None
        if isinstance(schema, Mapping):
            kind = schema.get("type")
            kinds = set(kind) if isinstance(kind, list) else {kind}
            enum = schema.get("enum")
            if "string" in kinds or (isinstance(enum, list) and raw in enum):
                if raw == "null" and "null" in kinds:
                    return None
                data = loads(raw) if kinds - {"string", "null", None} else FAILED
                found = _json_type(data) if data is not FAILED else ""
                fits = found in kinds or (found == "integer" and "number" in kinds)
                return data if fits else raw
        return json_or_text(raw)


def _json_type(value: Any) -> str:
    """The JSON Schema type a decoded value has (``integer`` for a whole number)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def typed_value(tools: ToolSet | None, name: str, key: str, raw: str) -> Any:
    return tools.typed(name, key, raw) if tools is not None else json_or_text(raw)


def partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest proper prefix of ``tag`` that ``text`` ends with."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def read_json(
    text: str, start: int, final: bool, scan: JsonScan | None = None
) -> tuple[Any, int] | Attempt | None:
    """The JSON object/array at ``text[start:]`` (after whitespace) and where it ends.

    None while incomplete; a failed :class:`Attempt` (consuming everything) when the
    text can't be JSON or the stream ended inside it.  ``scan``: see :class:`JsonScan`.
    """
    at = skip_ws(text, start)
    if at >= len(text):
        return Attempt(len(text), None, "no arguments") if final else None
    try:
        end = json_end(text, at, scan)
    except ValueError:
        return Attempt(len(text) if final else at, None, "arguments are not JSON")
    if end is None:
        return Attempt(len(text), None, "unterminated JSON") if final else None
    data = loads(text[at:end])
    if data is FAILED:
        return Attempt(end, None, "invalid JSON")
    return data, end


def skip_ws(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def expect(text: str, at: int, tag: str) -> int | None:
    """After optional whitespace, ``tag`` at ``at``: its end; None if it may still be
    arriving; -1 when something else is there."""
    at = skip_ws(text, at)
    rest = text[at : at + len(tag)]
    if rest == tag:
        return at + len(tag)
    if tag.startswith(rest):
        return None
    return -1


def json_calls(
    data: Any,
    *,
    name: str = "name",
    args: tuple[str, ...] = ("arguments", "parameters"),
    ident: str = "id",
    need_args: bool = False,
) -> list[RawCall] | None:
    """Calls out of a decoded JSON object or array of objects; None if any isn't one.

    ``need_args`` refuses an object without arguments (Llama's bare JSON: an ordinary
    JSON reply that happens to have a "name" is not a call).
    """
    items = data if isinstance(data, list) else [data]
    calls = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get(name), str):
            return None
        found = [item[k] for k in args if k in item]
        if need_args and not found:
            return None
        call_id = item.get(ident)
        calls.append(
            RawCall(
                item[name], found[0] if found else {}, call_id if isinstance(call_id, str) else None
            )
        )
    return calls or None


def to_close(text: str, start: int, close: str, final: bool, why: str) -> Attempt | None:
    """A broken region: given back up to and including its close tag (all of it at the
    end of the stream); None while the close tag may still come."""
    at = text.find(close, start)
    if at >= 0:
        return Attempt(at + len(close), None, why)
    return Attempt(len(text), None, why) if final else None


# One call read at a place: (the call, where it ends), -1 when no call is there, the
# reason it is broken, or None while it is incomplete.
Step = tuple[RawCall, int] | int | str | None


def unterminated(text: str, final: bool) -> Attempt | None:
    """The stream ended inside a call (None while more may come)."""
    return Attempt(len(text), None, "unterminated call") if final else None


def read_calls(
    text: str,
    at: int,
    final: bool,
    one: Callable[[int], Step],
    broken: Callable[[str], Attempt | None],
    *,
    many: bool = True,
) -> tuple[list[RawCall], int] | Attempt | None:
    """Calls one after another from ``at`` (only the first unless ``many``), each read
    by ``one``: (the calls, where they end), else what the region is (``broken`` makes
    it of a reason) or None while it is incomplete."""
    calls: list[RawCall] = []
    while True:
        got = one(at)
        if got is None:
            return unterminated(text, final)
        if isinstance(got, str):
            return broken(got)
        if isinstance(got, int):
            return calls, at
        calls.append(got[0])
        at = got[1]
        if not many:
            return calls, at


def call_name(
    text: str, at: int, tag: str, stop: str, final: bool
) -> tuple[str, int] | int | str | None:
    """A call's ``tag`` at ``at`` (after whitespace), then its function name up to
    ``stop``: (the name, where the text after ``stop`` begins); else as a :data:`Step`:
    -1 when no ``tag`` is there, a reason when the name is missing, None while either may
    still come."""
    begin = expect(text, at, tag)
    if begin is None or begin == -1:
        return -1 if final else begin
    end = text.find(stop, begin)
    if end < 0:
        return None if len(text) - begin <= MAX_NAME else "no function name"
    name = text[begin:end].strip()
    if not name or len(name) > MAX_NAME or "\n" in name:
        return "no function name"
    return name, end + len(stop)


def end_calls(
    text: str, at: int, close: str | None, final: bool, calls: list[RawCall]
) -> Attempt | None:
    """Calls that end at ``at``, then ``close`` (taken when it follows; None while it may
    still come); with no ``close`` the region ends at ``at``."""
    end = expect(text, at, close) if close is not None else -1
    if end is None and not final:
        return None
    return Attempt(end if end is not None and end > 0 else at, calls)


def calls_then_close(
    text: str,
    got: tuple[list[RawCall], int] | Attempt | None,
    final: bool,
    *,
    since: int,
    close: str,
    closed: bool,
    why: str,
) -> Attempt | None:
    """A region of calls as ``read_calls`` read it: what it gave when that is not calls;
    no call breaks the region from ``since`` to ``close`` (see :func:`to_close`, ``why``);
    else the calls, then ``close`` where the region must end with it (``closed``)."""
    if not isinstance(got, tuple):
        return got
    calls, at = got
    if not calls:
        return to_close(text, since, close, final, why)
    return end_calls(text, at, close if closed else None, final, calls)


def calls_region(
    text: str,
    at: int,
    final: bool,
    one: Callable[[int], Step],
    *,
    since: int,
    close: str,
    broken_close: str,
    closed: bool,
    why: str,
    many: bool = True,
) -> Attempt | None:
    """A region of calls read by ``one`` from ``at`` (see :func:`read_calls`), then
    closed as :func:`calls_then_close` closes it; a broken call breaks the region from
    ``since`` up to ``broken_close`` (the region's close when it was opened, else the
    call's)."""
    got = read_calls(
        text,
        at,
        final,
        one,
        lambda reason: to_close(text, since, broken_close, final, reason),
        many=many,
    )
    return calls_then_close(text, got, final, since=since, close=close, closed=closed, why=why)


def end_call(
    text: str, at: int, close: str, final: bool, call: RawCall, *, since: int, why: str
) -> Attempt | None:
    """One call whose ``close`` must follow at ``at``: anything else breaks the region
    from ``since`` (see :func:`to_close`, ``why``); the stream's end closes it."""
    end = expect(text, at, close)
    if end is None and not final:
        return None
    if end == -1:
        return to_close(text, since, close, final, why)
    return Attempt(end if end is not None else len(text), [call])
