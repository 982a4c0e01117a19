"""Functionary v3.2: every message is ``>>>recipient\\n`` then its body.

The prompt ends with ``>>>``, so the reply starts with the recipient: ``all``
for text to the user, else a function name followed by its JSON arguments
(``python`` may take raw code, read as ``{"code": ..}``).  Later messages start
with ``>>>`` again::

    all
    Let me check.>>>get_weather
    {"city": "Paris"}

The ``all`` header is markup even when the request offered no tools.
"""

from __future__ import annotations

import re

from localllm.toolcalls.base import MAX_NAME, Attempt, RawCall, Syntax, ToolSet, read_json

PREFIX = ">>>"
_NAME = re.compile(r"[A-Za-z_][\w.\-]*\Z")


class Functionary(Syntax):
    starts = (PREFIX,)
    strip = ()  # a stray ">>>" in text is the model's (Python prompts, quotes)
    markers = ()  # ">>>" is plain text in Functionary's vocabulary

    def leading(self, text: str, first: bool) -> bool | None:
        return first

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        head = len(PREFIX) if text.startswith(PREFIX) else 0
        line_end = text.find("\n", head)
        if line_end < 0:
            if len(text) - head <= MAX_NAME and not final:
                return None
            return Attempt(len(text) if final else head, None)  # no recipient: plain text
        recipient = text[head:line_end].strip()
        if recipient == "all":
            return Attempt(line_end + 1, [])
        if not _NAME.match(recipient):
            return Attempt(head, None)  # prose with a newline, not a recipient line
        body = line_end + 1
        if recipient == "python" and not text[body:].lstrip().startswith("{"):
            code_end = text.find(PREFIX, body)
            if code_end < 0 and not final:
                return None
            code_end = len(text) if code_end < 0 else code_end
            return Attempt(code_end, [RawCall("python", {"code": text[body:code_end]})])
        got = read_json(text, body, final, self.scan)
        if got is None:
            return None
        if isinstance(got, Attempt):
            return Attempt(line_end + 1, None, f"arguments of {recipient!r}: {got.why}")
        data, end = got
        return Attempt(end, [RawCall(recipient, data)])
