"""The streaming parser shared by every marker-based format: thinking, content, call regions.

Owns :class:`MarkupParser`, which a :class:`~localllm.toolcalls.base.Syntax` plugs
into.  Each piece first goes through the reasoning splitter (``thinking.py``), then
the content is scanned for the syntax's call markers:

- text before a marker is content, streamed at once, except a tail that might be
  the start of a marker (held until the next piece decides), so a call never
  leaks as content while it streams;
- from a marker on, the text is a call region, held until the syntax can read it
  whole; its calls are checked against the request's tools (known name, object
  arguments);
- a region that doesn't read as a valid call becomes content (a warning is
  logged), never an exception;
- the format's control markers are removed from content wherever they appear.

Without tools in the request nothing is turned into a call: the markup's text is
content (markers removed), as the model wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import (
    Attempt,
    Parsed,
    RawCall,
    Syntax,
    ToolCall,
    ToolSet,
    partial_tag_len,
)
from localllm.toolcalls.jsonscan import loads
from localllm.toolcalls.thinking import ThinkingSplitter

log = logging.getLogger(__name__)


class MarkupParser:
    """A :class:`~localllm.toolcalls.base.FormatParser` for one :class:`Syntax`."""

    def __init__(
        self,
        syntax: Syntax,
        tools: Sequence[JSONObject] | None,
        think: bool | None,
        *,
        tags: tuple[str, str] | None,
        opened: bool = False,
        name: str = "",
    ) -> None:
        self.syntax = syntax
        self.name = name
        self.tools = ToolSet(tools) if tools else None
        self._hide_thinking = think is False
        exits = tuple(m for m in (*syntax.starts, *syntax.strip) if m not in (tags or ()))
        self._splitter = ThinkingSplitter(*tags, opened=opened, exits=exits) if tags else None
        self._buf = ""
        # Reasoning from a call marker on, held until the block closes (it was reasoning
        # that mentions a call) or the reply ends inside it (the model called from its
        # reasoning without closing it: the calls are read as calls).
        self._held = ""
        self._marked = False  # the held reasoning has a call marker
        self._first = True  # at the reply's start (the syntax may read a bare call there)
        self._after_call = False  # whitespace between calls is formatting
        self._in_region = False  # the buffer starts with a call region being read
        self._count = 0
        self._holdable = tuple(dict.fromkeys(syntax.starts + syntax.strip))

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        if self._splitter is not None:
            thinking, text = self._splitter.feed(text)
            self._reasoning(thinking, out, closed=not self._splitter.in_thinking)
        self._buf += text
        self._scan(out, final=False)
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        if self._splitter is not None:
            thinking, text = self._splitter.feed("")
            self._reasoning(thinking, out, closed=not self._splitter.in_thinking)
            self._buf += text
            unclosed = self._splitter.in_thinking
            thinking, text = self._splitter.finish()
            rest = (self._held + thinking + text).lstrip()
            if unclosed and self._marked and self._has_calls(rest):
                # Calls written from inside reasoning never closed: read them as calls.
                self._buf = rest + self._buf
                self._held, self._marked = "", False
            else:
                self._reasoning(thinking, out, closed=True)
                self._buf += text
        self._scan(out, final=True)
        return out

    def _reasoning(self, text: str, out: Parsed, *, closed: bool) -> None:
        """Reasoning from the splitter: shown at once, except from a call marker on (and a
        tail that may be the start of one), held until the block closes."""
        held = self._held + text
        if not self._marked:
            at = min((i for i in (held.find(m) for m in self.syntax.starts) if i >= 0), default=-1)
            if at >= 0:
                self._marked = True
                keep = len(held) - len(held[:at].rstrip())  # with the whitespace before it
            else:
                keep = max((partial_tag_len(held, m) for m in self.syntax.starts), default=0)
                if keep:  # the start of a marker, and the whitespace before it
                    keep = len(held) - len(held[: len(held) - keep].rstrip())
        else:
            keep = len(held)
        if closed:
            keep, self._marked = 0, False
        self._thinking(held[: len(held) - keep], out)
        self._held = held[len(held) - keep :]

    def _has_calls(self, text: str) -> bool:
        """Whether ``text`` read as a reply holds a call (else it stays reasoning)."""
        probe = MarkupParser(self.syntax, None, None, tags=None, name=self.name)
        probe.tools = self.tools
        found = probe.feed(text)
        found.extend(probe.finish())
        return bool(found.calls)

    def _thinking(self, text: str, out: Parsed) -> None:
        # think=false drops reasoning the model emitted anyway: never shown, not as content.
        if text and not self._hide_thinking:
            out.thinking += text

    # -- scanning ---------------------------------------------------------------------
    def _scan(self, out: Parsed, *, final: bool) -> None:
        while True:
            if self._in_region:
                if not self._region(out, final):
                    return
                self._in_region = False
                continue
            if self._after_call or self._first:
                if self._after_call:
                    self._buf = self._buf.lstrip()
                stripped = self._buf.lstrip()
                if not stripped and not final:
                    return
                verdict = self.syntax.leading(stripped, self._first) if stripped else False
                if verdict is None and not final:
                    return
                self._first = self._after_call = False
                if verdict:
                    self._in_region = True
                    continue
            at = self._next_start()
            if at < 0:
                keep = (
                    0
                    if final
                    else max((partial_tag_len(self._buf, m) for m in self._holdable), default=0)
                )
                cut = len(self._buf) - keep
                out.content += self._clean(self._buf[:cut])
                self._buf = self._buf[cut:]
                return
            out.content += self._clean(self._buf[:at])
            self._buf = self._buf[at:]
            self._in_region = True

    def _next_start(self) -> int:
        found = [at for at in (self._buf.find(m) for m in self.syntax.starts) if at >= 0]
        return min(found, default=-1)

    def _region(self, out: Parsed, final: bool) -> bool:
        """Read the call region at the buffer's start; False while it needs more text."""
        attempt = self.syntax.parse(self._buf, self.tools, final)
        if attempt is None:
            return False
        end = max(attempt.end, 1)
        raw, self._buf = self._buf[:end], self._buf[end:]
        calls = self._check(attempt)
        if calls is None:
            out.content += self._clean(raw)
            return True
        out.calls.extend(calls)
        self._after_call = bool(calls)
        return True

    def _check(self, attempt: Attempt) -> list[ToolCall] | None:
        if attempt.calls is None:
            if attempt.why:
                log.warning("%s tool call kept as content: %s", self.name, attempt.why)
            return None
        if self.tools is None and attempt.calls:
            return None  # no tools were offered: the markup stays the model's text
        calls = []
        for raw in attempt.calls:
            call = self._call(raw)
            if isinstance(call, str):
                log.warning("%s tool call kept as content: %s", self.name, call)
                return None
            calls.append(call)
        for call in calls:
            call.index, self._count = self._count, self._count + 1
        return calls

    def _call(self, raw: RawCall) -> ToolCall | str:
        if not raw.name or len(raw.name) > 256:
            return "no function name"
        if self.tools is not None and not self.tools.known(raw.name):
            return f"unknown function {raw.name!r}"
        args = raw.arguments
        if isinstance(args, str):  # some models double-encode the arguments
            args = loads(args) if args.strip() else {}
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return f"arguments of {raw.name!r} are not an object"
        return ToolCall(raw.name, args, 0, raw.id or None)

    def _clean(self, text: str) -> str:
        for marker in self.syntax.strip:
            text = text.replace(marker, "")
        return text
