"""Reading JSON out of generated text: values, their ends, and a scan that goes on.

Owns :func:`loads` (``json.loads`` that fails softly and never returns a lone
surrogate), :func:`json_or_text`, and the bracket scan every JSON-carrying
format (and LFM2's Python lists) uses to find where a value ends
(:func:`json_end`, :func:`scan_brackets`), with :class:`JsonScan`, which lets a
scan go on from where the last one stopped as a call streams in.
"""

from __future__ import annotations

import json
import re
from typing import Any


def json_or_text(raw: str) -> Any:
    """``raw`` read as JSON when it parses, else the text itself."""
    data = loads(raw)
    return raw if data is FAILED else data


def no_surrogates(data: Any) -> Any:
    """``data`` with every lone surrogate (JSON's ``"\\udf88"`` without its pair) made
    U+FFFD: such a string cannot be encoded as UTF-8, so it would fail the response."""
    if isinstance(data, str):
        return data.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(data, list):
        return [no_surrogates(v) for v in data]
    if isinstance(data, dict):
        return {no_surrogates(k): no_surrogates(v) for k, v in data.items()}
    return data


FAILED = object()


def loads(text: str) -> Any:
    """``json.loads`` that returns :data:`FAILED` instead of raising, and never a lone
    surrogate (a model may write one as an escape)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return FAILED
    return no_surrogates(data) if "\\u" in text else data


# A JSON string (its close quote in group 1: absent while the text ends inside it) or a
# bracket; json_end walks these with the regex engine rather than a Python loop per
# character.
_JSON_SCAN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(")?|[][{}]', re.S)
# The rest of a string whose opening quote was scanned before.
_TAILS = {q: re.compile(rf"[^{q}\\]*(?:\\.[^{q}\\]*)*({q})?", re.S) for q in "'\""}


class JsonScan:
    """Where the scan of an unfinished value stopped: a position, the bracket depth, and
    the quote of the string it stopped in.

    A call region is read again each time a piece arrives; a syntax keeps one of these
    (:attr:`~localllm.toolcalls.base.Syntax.scan`) so that each read goes on from where
    the last one stopped instead of from the start (a 20 KB call would otherwise cost
    seconds of event-loop time, read whole once per token)."""

    __slots__ = ("depth", "pos", "quote", "start", "text")

    def __init__(self) -> None:
        self.text, self.start, self.pos, self.depth, self.quote = "", -1, 0, 0, ""

    def resume(self, text: str, start: int) -> tuple[int, int, str]:
        """(position, depth, quote) to go on from in ``text``: where the last scan
        stopped if ``text`` extends the text it scanned, else the start."""
        if self.start == start and text.startswith(self.text):
            return self.pos, self.depth, self.quote
        return start, 0, ""

    def stop(self, text: str, start: int, pos: int, depth: int, quote: str) -> None:
        self.text, self.start, self.pos, self.depth, self.quote = text, start, pos, depth, quote


def scan_brackets(
    text: str, start: int, tokens: re.Pattern[str], opening: str, scan: JsonScan | None
) -> int | None:
    """End of the bracketed value opening at ``start`` (``tokens`` finds its strings and
    brackets, a string's close quote in a group); None while incomplete."""
    pos, depth, quote = scan.resume(text, start) if scan is not None else (start, 0, "")
    while True:
        if quote:
            m = _TAILS[quote].match(text, pos)
            if m is None or m.group(1) is None:  # the text still ends inside the string
                if scan is not None:
                    scan.stop(text, start, m.end() if m else pos, depth, quote)
                return None
            pos, quote = m.end(), ""
        for m in tokens.finditer(text, pos):
            c = text[m.start()]
            if c in "'\"":
                if not any(m.groups()):  # the text ends inside this string
                    pos, quote = m.end(), c
                    break
            elif c in opening:
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return m.end()
            pos = m.end()
        else:
            if scan is not None:
                scan.stop(text, start, len(text), depth, "")
            return None


def json_end(text: str, start: int = 0, scan: JsonScan | None = None) -> int | None:
    """End index of the JSON object/array opening at ``start``; None while incomplete.

    Raises ValueError when ``text[start]`` doesn't open one.  With ``scan``, a text
    that extends the one scanned last is scanned from where that scan stopped.
    """
    if start >= len(text) or text[start] not in "{[":
        raise ValueError("not a JSON object or array")
    return scan_brackets(text, start, _JSON_SCAN, "{[", scan)
