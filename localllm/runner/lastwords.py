"""What a runner's failure tells the client, and what stays in the daemon's log.

A runner that dies or fails a load leaves its last log lines behind: llama.cpp's
messages, a ggml backtrace (``#28 0x00007feb… in __libc_start_call_main``), a
Python traceback.  They explain the failure to whoever reads the daemon's log,
but in a client's error body they are noise at best, and they carry paths of
the user's home (model blobs, the build folder, site-packages) at worst.  So
the client gets one line: how the runner ended and, where the log has one, the
single line that says why (``out of memory``, ``GGML_ASSERT(...) failed``,
``error loading model: ...``), with every absolute path cut to its last part.
``for_log`` is the whole tail, for the log; :class:`Tail` drains a child's stderr
into the daemon's log and keeps the tail.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from collections.abc import Sequence

log = logging.getLogger("localllm.runner")

# An absolute POSIX path (or ~/...) not inside a URL or a longer word: "/home/a/b.gguf".
_PATH = re.compile(r"(?<![\w.~:/-])~?/(?:[^\s/'\"():;,<>\[\]]+/)+(?=[^\s/'\"():;,<>\[\]]*)")
# Lines that are a backtrace, debugger chatter or the runner's own routine logging
# (runner/worker.py's format: an earlier request's "failed" is not why it died).
_NOISE = re.compile(
    r"^\s*#\d+\s|0x[0-9a-fA-F]{6,}|^\s*\[(New|Thread|Inferior)\b|^\s*File \"|"
    r"^Traceback \(most recent call last\)|^\s*(warning: )?(ptrace|Couldn't|Could not attach)|"
    r"^runner\[\d+\] (DEBUG|INFO) ",
)
# Why a runner failed, best first: memory, then assertions and aborts, then errors.
_REASONS = (
    re.compile(
        r"out of memory|failed to allocate|cannot allocate|\bOOM\b|"
        r"insufficient memory",
        re.IGNORECASE,
    ),
    re.compile(
        r"GGML_ASSERT|assert(ion)? .*failed|terminate called|what\(\)|abort|crashed", re.IGNORECASE
    ),
    re.compile(r"\berror\b", re.IGNORECASE),
    re.compile(r"fail|cannot|can't|unable|invalid|not enough|unsupported", re.IGNORECASE),
)
MAX_LINE = 240


def scrub_paths(text: str) -> str:
    """``text`` with each absolute path cut to its last part (the file's name)."""
    return _PATH.sub("", text)


def reason(lines: Sequence[str]) -> str:
    """The one log line that best says why the runner failed, scrubbed; "" if none."""
    candidates = [line.strip() for line in lines if line.strip() and not _NOISE.search(line)]
    for pattern in _REASONS:
        for line in reversed(candidates):
            if pattern.search(line):
                text = scrub_paths(line)
                return text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "…"
    return ""


def with_reason(message: str, lines: Sequence[str]) -> str:
    """``message`` and, when the log has one, the line that says why."""
    why = reason(lines)
    return f"{message}: {why}" if why else message


def for_log(lines: Sequence[str]) -> str:
    """The tail as the daemon's log shows it (whole, paths and all: that is its reader)."""
    return "; last log lines:\n" + "\n".join(lines) if lines else ""


def lost_workers(endpoints: Sequence[str]) -> str:
    """ ": lost RPC worker host:port" for each of ``endpoints`` that takes no connection
    now (ggml aborts a runner when a worker vanishes); blocking, up to 0.5 s each."""
    from localllm.hardware.rpc import reachable

    gone = [ep for ep in endpoints if reachable(ep, timeout=0.5)]
    return f": lost RPC worker {', '.join(gone)}" if gone else ""


class Tail:
    """A child's stderr (llama.cpp's log) drained into the ``localllm.runner`` logger at
    DEBUG: its last lines kept for a failure's message, and when it last wrote one."""

    def __init__(self, pid: int, keep: int = 40) -> None:
        self.pid = pid
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.last_output = 0.0  # time.monotonic() of the child's latest log line

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        """Read ``stream`` line by line until it ends."""
        assert stream is not None
        pending = b""
        while chunk := await stream.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                self._line(raw)
        if pending:
            self._line(pending)

    def _line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            self.lines.append(line)
            self.last_output = time.monotonic()
            log.debug("runner %d: %s", self.pid, line)
