"""Tool calls out of generated text, incrementally, for the common chat-template families.

Families (chosen from the chat template's text by :func:`detect_family`):

- ``hermes`` (Hermes, Qwen 2.5/3, many fine-tunes): ``<tool_call>{"name": ..,
  "arguments": {..}}</tool_call>``, one block per call.
- ``llama3``: a JSON object ``{"name": .., "parameters": {..}}`` (or ``arguments``)
  at the start of the reply, optionally after ``<|python_tag|>``; several may
  be separated by ``;``.  Llama only calls tools at the start of a reply.
- ``mistral``: ``[TOOL_CALLS][{"name": .., "arguments": {..}}, ..]`` or the
  newer ``[TOOL_CALLS]name[ARGS]{..}`` (with an optional ``[CALL_ID]id``).

:class:`ToolCallParser` is fed the pieces of a stream and returns the content
that can be shown now (never a prefix of a tool-call marker) and the calls
that have closed.  Text that looks like a call but doesn't parse is returned
as content rather than failing the request: the user sees what the model
wrote, which is the most useful thing when a model gets the format wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Family = Literal["hermes", "llama3", "mistral"]

_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL_TAG, _MISTRAL_ARGS, _MISTRAL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_MAX_NAME = 256


@dataclass
class ToolCall:
    """One parsed call; ``arguments`` keeps the model's key order."""

    name: str
    arguments: dict[str, Any]
    index: int = 0
    id: str | None = None

    def to_ollama(self) -> dict[str, Any]:
        """Ollama's wire shape (``message.tool_calls[i]``)."""
        out: dict[str, Any] = {"function": {"index": self.index, "name": self.name,
                                            "arguments": self.arguments}}
        if self.id:
            out["id"] = self.id
        return out


@dataclass
class ParseResult:
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)


def detect_family(template: str) -> Family | None:
    """The tool-call family a chat template (Jinja or Go) teaches its model, if any."""
    if _MISTRAL_TAG in template:
        return "mistral"
    if _HERMES_OPEN in template:
        return "hermes"
    if _PYTHON_TAG in template or ("<|start_header_id|>" in template
                                   and '"parameters"' in template):
        return "llama3"
    return None


def partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest proper prefix of ``tag`` that ``text`` ends with."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def json_end(text: str, start: int = 0) -> int | None:
    """End index of the JSON object/array opening at ``start``; None while incomplete.

    Raises ValueError when ``text[start]`` doesn't open one.
    """
    if start >= len(text) or text[start] not in "{[":
        raise ValueError("not a JSON object or array")
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


_FAILED = object()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _FAILED


class ToolCallParser:
    """Incremental tool-call parser; ``family=None`` passes all text through as content."""

    def __init__(self, family: Family | None) -> None:
        self.family = family
        self._buf = ""
        self._state = "start" if family == "llama3" else "text"
        self._raw = ""  # text consumed into a call attempt, given back as content if it fails
        self._after_call = False
        self._count = 0
        self._name = ""
        self._call_id: str | None = None

    @classmethod
    def for_template(cls, template: str) -> ToolCallParser:
        return cls(detect_family(template))

    def feed(self, text: str) -> ParseResult:
        self._buf += text
        out = ParseResult()
        if self.family is None:
            out.content, self._buf = self._buf, ""
            return out
        while self._step(out):
            pass
        return out

    def finish(self) -> ParseResult:
        """End of generation: flush what is held back; an unclosed call is tried, else content."""
        out = self.feed("")
        if self._state in ("call", "json", "array", "args"):
            if not self._emit_json(self._buf, out):
                out.content += self._raw + self._buf
        elif self._state in ("start", "tag", "name"):
            out.content += self._raw + self._buf
        else:
            out.content += self._buf
        self._buf, self._raw = "", ""
        self._state = "done"
        return out

    # -- the state machine; each step returns whether it made progress ---------------------
    def _step(self, out: ParseResult) -> bool:
        if self._after_call and self._state == "text":
            # Whitespace between or after calls is formatting, not content.
            self._buf = self._buf.lstrip()
            if not self._buf:
                return False
            self._after_call = False
        state = self._state
        if state == "text":
            return self._text(out)
        if state == "call":  # hermes: inside <tool_call>
            end = self._hermes_body_end()
            if end is None:
                return False
            body, self._buf = self._buf[:end], self._buf[end + len(_HERMES_CLOSE):]
            if not self._emit_json(body, out):
                out.content += self._raw + body + _HERMES_CLOSE
            self._raw, self._state, self._after_call = "", "text", True
            return True
        if state in ("start", "between"):
            return self._llama_start(out)
        if state in ("json", "array", "args"):
            return self._balanced(out)
        if state == "tag":  # mistral: after [TOOL_CALLS]
            stripped = self._buf.lstrip()
            if not stripped:
                return False
            self._raw += self._buf[:len(self._buf) - len(stripped)]
            self._buf = stripped
            self._state = "array" if stripped.startswith("[") else "name"
            return True
        if state == "name":
            return self._mistral_name(out)
        return False

    def _text(self, out: ParseResult) -> bool:
        tag = _HERMES_OPEN if self.family == "hermes" else _MISTRAL_TAG
        at = self._buf.find(tag)
        if at < 0:
            keep = partial_tag_len(self._buf, tag)
            cut = len(self._buf) - keep
            out.content += self._buf[:cut]
            self._buf = self._buf[cut:]
            return False
        out.content += self._buf[:at]
        self._raw, self._buf = tag, self._buf[at + len(tag):]
        self._state = "call" if self.family == "hermes" else "tag"
        return True

    def _hermes_body_end(self) -> int | None:
        """Where ``</tool_call>`` starts, skipping one inside the JSON's strings."""
        stripped = self._buf.lstrip()
        lead = len(self._buf) - len(stripped)
        if stripped[:1] in ("{", "["):
            end = json_end(stripped)
            if end is None:
                return None
            after = stripped[end:].lstrip()
            if after.startswith(_HERMES_CLOSE):
                return len(self._buf) - len(after)
            if _HERMES_CLOSE.startswith(after):
                return None  # the close tag may still be arriving
        elif not stripped:
            return None
        at = self._buf.find(_HERMES_CLOSE, lead)
        return at if at >= 0 else None

    def _llama_start(self, out: ParseResult) -> bool:
        stripped = self._buf.lstrip()
        if self._state == "between":
            stripped = stripped.lstrip(";").lstrip()
        if not stripped:
            return False
        lead = self._buf[:len(self._buf) - len(stripped)]
        if stripped.startswith(_PYTHON_TAG):
            self._raw += lead + _PYTHON_TAG
            self._buf = stripped[len(_PYTHON_TAG):]
            return True
        if _PYTHON_TAG.startswith(stripped):
            return False  # maybe the tag, arriving in pieces
        if stripped.startswith("{"):
            self._raw += lead
            self._buf, self._state = stripped, "json"
            return True
        # Not a call: the rest of the reply is plain content.
        out.content += ("" if self._state == "between" else self._raw + lead) + stripped
        self._buf, self._raw, self._state = "", "", "plain"
        self.family = None
        return False

    def _mistral_name(self, out: ParseResult) -> bool:
        at = self._buf.find(_MISTRAL_ARGS)
        head = self._buf if at < 0 else self._buf[:at]
        if len(head) > _MAX_NAME or "\n" in head or "{" in head:
            self._give_back(out)
            return True
        if at < 0:
            return False
        name, _, call_id = head.partition(_MISTRAL_ID)
        self._name, self._call_id = name.strip(), (call_id.strip() or None)
        self._raw += self._buf[:at + len(_MISTRAL_ARGS)]
        self._buf = self._buf[at + len(_MISTRAL_ARGS):].lstrip()
        self._state = "args"
        return True

    def _balanced(self, out: ParseResult) -> bool:
        stripped = self._buf.lstrip()
        self._raw += self._buf[:len(self._buf) - len(stripped)]
        self._buf = stripped
        if not stripped:
            return False
        try:
            end = json_end(self._buf)
        except ValueError:
            self._give_back(out)
            return True
        if end is None:
            return False
        body, self._buf = self._buf[:end], self._buf[end:]
        if not self._emit_json(body, out):
            self._raw += body
            self._give_back(out)
            return True
        self._raw, self._after_call = "", True
        self._state = "between" if self.family == "llama3" else "text"
        return True

    def _give_back(self, out: ParseResult) -> None:
        """A failed call attempt: what was held back is content after all."""
        if self.family == "llama3":
            out.content += self._raw + self._buf
            self._buf, self._state, self.family = "", "plain", None
        else:
            out.content += self._raw
            self._state = "text"
        self._raw = ""

    def _emit_json(self, body: str, out: ParseResult) -> bool:
        data = _loads(body.strip())
        if data is _FAILED:
            return False
        if self._state == "args":
            calls = [{"name": self._name, "arguments": data, "id": self._call_id}]
        else:
            calls = data if isinstance(data, list) else [data]
        parsed = [self._to_call(c) for c in calls]
        if not parsed or any(p is None for p in parsed):
            return False
        for call in parsed:
            assert call is not None
            out.calls.append(call)
        return True

    def _to_call(self, obj: Any) -> ToolCall | None:
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            return None
        if self.family == "llama3" and "parameters" not in obj and "arguments" not in obj:
            return None  # an ordinary JSON reply that happens to have a "name"
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models double-encode the arguments
            args = _loads(args) if args.strip() else {}
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None
        call_id = obj.get("id")
        call = ToolCall(obj["name"], args, self._count,
                        call_id if isinstance(call_id, str) and call_id else None)
        self._count += 1
        return call
