"""The ``echo`` model: the tiny model on a template that renders ``role:content`` per message,
so its greedy answer is known; and the CLI on a pseudo-terminal, read up to a marker."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.daemon import REPO
from tests.support.tinymodel import expected_greedy

ECHO_TEMPLATE = "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}{% endfor %}"


def render(messages: list[tuple[str, str]]) -> str:
    """What ECHO_TEMPLATE makes of a conversation (mirrors the Jinja above)."""
    return "".join(f"{role}:{content}" for role, content in messages)


def answer(messages: list[tuple[str, str]], num_predict: int = -1) -> str:
    return expected_greedy(render(messages), num_predict)


def read_fd_until(fd: int, marker: bytes, seen: bytes = b"", timeout: float = 30) -> bytes:
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in {seen[-300:]!r}"
        if select.select([fd], [], [], left)[0]:
            seen += os.read(fd, 4096)
    return seen


@contextmanager
def in_terminal(env: dict[str, str], *args: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``python -m localllm ARGS`` on a pseudo-terminal: the process and the terminal's
    controller fd, the process killed if it still runs and the fd closed when the block ends."""
    import pty

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "localllm", *args],
        cwd=REPO,
        env=env,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        close_fds=True,
    )
    os.close(terminal)
    try:
        yield proc, controller
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
