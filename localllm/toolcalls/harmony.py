"""gpt-oss's harmony format: a reply is a sequence of messages, each a header then a body.

::

    <|channel|>analysis<|message|>reasoning<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Paris"}<|call|>          (one line in the stream)
    <|start|>assistant<|channel|>final<|message|>the answer<|return|>

The header (up to ``<|message|>``) names the channel and, with ``to=``, the
recipient (before or after ``<|channel|>``).  ``analysis`` is thinking, ``final``
and plain ``commentary`` are content, ``to=functions.x`` is a call whose body is
its JSON arguments; a message to another recipient (the built-in ``python`` or
``browser`` tools) is not shown.  A reply that doesn't start with a header is
plain content.  Owns :class:`HarmonyParser`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import Parsed, ToolCall, ToolSet, partial_tag_len
from localllm.toolcalls.jsonscan import loads

log = logging.getLogger(__name__)

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
_BODY_END = (END, CALL, RETURN, START)
_HEADER_OPENERS = (START, CHANNEL, "to=", "assistant")
_MAX_HEADER = 512
_CHANNEL = re.compile(r"<\|channel\|>\s*([\w.-]+)")
_RECIPIENT = re.compile(r"to=([^\s<]+)")


class HarmonyParser:
    """A :class:`~localllm.toolcalls.base.FormatParser` for harmony replies."""

    name = "gpt_oss"  # the format's name, for the log
    body_end: tuple[str, ...] = _BODY_END  # what ends a message's body
    closers: tuple[str, ...] = (END, CALL, RETURN)  # ... and is consumed with it
    markup: tuple[str, ...] = MARKERS  # removed from shown text

    def __init__(self, tools: Sequence[JSONObject] | None, think: bool | None) -> None:
        self.tools = ToolSet(tools) if tools else None
        self._hide_thinking = think is False
        self._buf = ""
        self._state = "header"
        self._kind = "content"  # what the current body is: thinking, content, call, hidden
        self._name = ""
        self._count = 0

    def feed(self, text: str) -> Parsed:
        self._buf += text
        out = Parsed()
        while self._step(out, final=False):
            pass
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        while self._step(out, final=True):
            pass
        if self._state == "header" and self._buf.strip():
            out.content += self._clean(self._buf)  # a header that never opened a body
        self._buf = ""
        return out

    def _step(self, out: Parsed, final: bool) -> bool:
        if self._state == "header":
            return self._header(out, final)
        ends = [at for at in (self._buf.find(m) for m in self.body_end) if at >= 0]
        at = min(ends, default=-1)
        if at < 0 and not final:
            if self._kind in ("thinking", "content"):  # stream it, holding a partial marker
                keep = max(partial_tag_len(self._buf, m) for m in self.body_end)
                self._emit(self._buf[: len(self._buf) - keep], out)
                self._buf = self._buf[len(self._buf) - keep :]
            return False
        body = self._buf if at < 0 else self._buf[:at]
        self._emit(body, out, closed=True)
        self._buf = "" if at < 0 else self._buf[at:]
        for marker in self.closers:  # a message's end marker; a START opens the next
            if self._buf.startswith(marker):
                self._buf = self._buf[len(marker) :]
        self._state = "header"
        return at >= 0

    def _header(self, out: Parsed, final: bool) -> bool:
        at = self._buf.find(MESSAGE)
        stripped = self._buf.lstrip()
        looks = any(stripped.startswith(m) or m.startswith(stripped) for m in _HEADER_OPENERS)
        if not stripped:
            return False
        if not looks or (at < 0 and len(self._buf) > _MAX_HEADER):
            self._state, self._kind = "body", "content"  # not harmony: plain content
            return True
        if at < 0:
            return False
        header, self._buf = self._buf[:at], self._buf[at + len(MESSAGE) :]
        channels = _CHANNEL.findall(header)
        recipients = _RECIPIENT.findall(header)
        channel = channels[-1] if channels else "final"
        recipient = recipients[-1] if recipients else ""
        self._state = "body"
        self._kind, self._name = self._classify(channel, recipient)
        return True

    def _classify(self, channel: str, recipient: str) -> tuple[str, str]:
        """What a message's body is (thinking, content, call, hidden) and the call's name."""
        if recipient.startswith("functions."):
            return "call", recipient.removeprefix("functions.")
        if recipient and recipient != "assistant":
            return "hidden", ""  # a built-in tool's message: not for the user
        return ("thinking" if channel == "analysis" else "content"), ""

    def _emit(self, text: str, out: Parsed, closed: bool = False) -> None:
        kind = self._kind
        if kind == "content":
            out.content += self._clean(text)
        elif kind == "thinking":
            if not self._hide_thinking:
                out.thinking += self._clean(text)
        elif kind == "call" and closed:
            calls = self._calls(text) if self.tools is not None else None
            if calls is None:
                out.content += self._clean(text)
            else:
                out.calls.extend(calls)

    def _calls(self, body: str) -> list[ToolCall] | None:
        """The calls a call message's body holds (harmony: its JSON arguments)."""
        return self._checked([(self._name, loads(body.strip()))])

    def _checked(self, raw: list[tuple[str, object]]) -> list[ToolCall] | None:
        why = ""
        for name, args in raw:
            if self.tools is None or not self.tools.known(name):
                why = f"unknown function {name!r}"
            elif not isinstance(args, dict):
                why = f"arguments of {name!r} are not a JSON object"
        if why or not raw:
            log.warning("%s tool call kept as content: %s", self.name, why or "no call")
            return None
        calls = []
        for name, args in raw:
            calls.append(ToolCall(name, dict(args) if isinstance(args, dict) else {}, self._count))
            self._count += 1
        return calls

    def _clean(self, text: str) -> str:
        for marker in self.markup:
            text = text.replace(marker, "")
        return text
