"""Showing a streamed chat answer: thinking and content, word wrap, Ctrl-C, ``--verbose`` stats.

Shared by ``localllm run``'s one-shot mode and its interactive session.
``stream_chat`` sends one chat request and prints its NDJSON chunks as
they arrive; Ctrl-C closes the stream (the daemon then cancels the
generation) and returns what had arrived, so a REPL can carry on.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from localllm.api.wire import ChatChunk, Message, Metrics, ToolCall
from localllm.cli.termsafe import Sanitizer

if TYPE_CHECKING:
    from localllm.api.bodies import ChatBody

_DIM = "\x1b[2m"
_RESET = "\x1b[0m"
_ESCAPE = re.compile(r"(\x1b\[[0-9;]*m)")


class WordWrap:
    """Breaks streamed text at spaces so that no line outgrows ``width`` columns.

    A word is held back until the whitespace after it arrives (or ``flush``),
    because only then is its length known; words longer than a line are cut.
    """

    def __init__(self, out: TextIO, width: int) -> None:
        self.out = out
        self.width = max(10, width)
        self.col = 0
        self.word = ""
        self.width_of_word = 0  # columns of ``word`` (escape sequences take none)
        self.spaces = ""  # written only once the next word is known to fit on the line

    def write(self, text: str) -> None:
        for part in _ESCAPE.split(text):
            if _ESCAPE.fullmatch(part):
                self.word += part  # a colour change takes no room on the line
                continue
            for ch in part:
                self._char(ch)
        self.out.flush()

    def _char(self, ch: str) -> None:
        if ch == "\n":
            self._emit_word()
            self.out.write("\n")
            self.col, self.spaces = 0, ""
        elif ch in " \t":
            self._emit_word()
            if self.col > 0:
                self.spaces += ch
        else:
            self.word += ch
            self.width_of_word += 1
            if self.width_of_word >= self.width:
                self._emit_word()

    def _emit_word(self) -> None:
        if not self.word:
            return
        if self.col > 0 and self.col + len(self.spaces) + self.width_of_word > self.width:
            self.out.write("\n")
            self.col, self.spaces = 0, ""
        self.out.write(self.spaces + self.word)
        self.col += len(self.spaces) + self.width_of_word
        self.word, self.spaces, self.width_of_word = "", "", 0

    def flush(self) -> None:
        self._emit_word()
        self.out.flush()


class StreamPrinter:
    """Writes thinking (dimmed on a terminal, between markers) and then the answer.

    The model's text is stripped of terminal control sequences (cli/termsafe.py);
    the dimming is ours and is written as it is."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        hide_thinking: bool = False,
        wordwrap: bool = True,
        color: bool | None = None,
    ) -> None:
        self.out = out if out is not None else sys.stdout
        tty = self.out.isatty()
        self.color = tty if color is None else color
        self.hide_thinking = hide_thinking
        # Wrapping only makes sense on a terminal; pipes get the text exactly.
        width = shutil.get_terminal_size().columns - 5 if tty else 0
        self.wrap = WordWrap(self.out, width) if wordwrap and width > 0 else None
        self.thinking = False
        self.last = "\n"
        # The model's text is foreign: one sanitizer per channel, as a sequence
        # begun in the thinking does not go on in the content.
        self.clean = {"thinking": Sanitizer(), "content": Sanitizer()}

    def _write(self, text: str) -> None:
        if not text:
            return
        if self.wrap is not None:
            self.wrap.write(text)
        else:
            self.out.write(text)
            self.out.flush()
        self.last = text[-1]

    def feed(self, message: Message) -> None:
        thinking = self.clean["thinking"].feed(str(message.get("thinking") or ""))
        content = self.clean["content"].feed(str(message.get("content") or ""))
        if thinking and not self.hide_thinking:
            if not self.thinking:
                self.thinking = True
                # Dim from here to the end of the thinking, which may span many chunks.
                self._write((_DIM if self.color else "") + "Thinking...\n")
            self._write(thinking)
        if content:
            self._end_thinking()
            self._write(content)

    def _end_thinking(self) -> None:
        if self.thinking:
            self.thinking = False
            sep = "" if self.last == "\n" else "\n"
            self._write(sep + "...done thinking." + (_RESET if self.color else "") + "\n\n")

    def finish(self) -> None:
        """End the answer on a fresh line."""
        self._end_thinking()
        if self.wrap is not None:
            self.wrap.flush()
        if self.last != "\n":
            self.out.write("\n")
            self.last = "\n"
        self.out.flush()


@dataclass
class Turn:
    """What one request produced: the text, the final chunk (None if cut) and timings."""

    content: str = ""
    thinking: str = ""
    final: ChatChunk | None = None
    interrupted: bool = False
    ttft: float | None = None  # seconds from sending to the first text
    tool_calls: list[ToolCall] = field(default_factory=list)


def stream_chat(client: Any, payload: ChatBody, printer: StreamPrinter) -> Turn:
    """Send ``payload`` as a chat request and print the answer as it streams."""
    turn = Turn()
    parts: dict[str, list[str]] = {"content": [], "thinking": []}
    start = time.monotonic()
    try:
        stream: Generator[ChatChunk, None, None] = client.chat(payload)
        with contextlib.closing(stream) as chunks:
            for chunk in chunks:
                message: Message = chunk.get("message") or {"role": "", "content": ""}
                for key, text in (
                    ("content", message.get("content")),
                    ("thinking", message.get("thinking")),
                ):
                    if text:
                        if turn.ttft is None:
                            turn.ttft = time.monotonic() - start
                        parts[key].append(str(text))
                turn.tool_calls.extend(message.get("tool_calls") or [])
                printer.feed(message)
                if chunk.get("done"):
                    turn.final = chunk
    except KeyboardInterrupt:
        # Leaving the ``closing`` block closed the HTTP stream: the daemon cancels.
        turn.interrupted = True
    finally:
        printer.finish()
    turn.content = "".join(parts["content"])
    turn.thinking = "".join(parts["thinking"])
    return turn


def go_duration(ns: int | float) -> str:
    """A duration written the way Go's ``time.Duration`` prints it (``1.234s``, ``12.5ms``)."""
    n = float(ns)
    for limit, unit, digits in ((1e3, "ns", 0), (1e6, "µs", 3), (1e9, "ms", 6)):
        if abs(n) < limit:
            return f"{_trim(n / 10**digits, digits)}{unit}"
    seconds = n / 1e9
    if seconds < 60:
        return f"{_trim(seconds, 9)}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m{_trim(rest, 9)}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes)}m{_trim(rest, 9)}s"


def _trim(value: float, digits: int) -> str:
    """Go's style: exact to the nanosecond, without trailing zeros."""
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"


def _rate(count: int, ns: int) -> str:
    return f"{count / (ns / 1e9):.2f} tokens/s" if ns > 0 else "n/a"


def stats_text(final: Metrics, ttft: float | None) -> str:
    """The ``--verbose`` block printed after an answer."""
    prompt_n, eval_n = int(final.get("prompt_eval_count") or 0), int(final.get("eval_count") or 0)
    prompt_ns = int(final.get("prompt_eval_duration") or 0)
    eval_ns = int(final.get("eval_duration") or 0)
    rows = [
        ("total duration", go_duration(int(final.get("total_duration") or 0))),
        ("load duration", go_duration(int(final.get("load_duration") or 0))),
        ("prompt eval count", f"{prompt_n} token(s)"),
        ("prompt eval duration", go_duration(prompt_ns)),
        ("prompt eval rate", _rate(prompt_n, prompt_ns)),
        ("eval count", f"{eval_n} token(s)"),
        ("eval duration", go_duration(eval_ns)),
        ("eval rate", _rate(eval_n, eval_ns)),
    ]
    if ttft is not None:
        rows.append(("time to first token", go_duration(ttft * 1e9)))
    return "\n".join(f"{k + ':':<22}{v}" for k, v in rows)


def print_stats(turn: Turn, err: TextIO | None = None) -> None:
    if turn.final is not None:
        print(stats_text(turn.final, turn.ttft), file=err or sys.stderr, flush=True)
