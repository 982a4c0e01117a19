"""Orphan checks: a stand-in daemon (parent_script.py) started and killed, its runner
watched until it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.daemon import REPO
from tests.support.runners import pid_alive


@contextmanager
def spawn_parent(model: str, kind: str, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """The stand-in daemon, killed (and its pipe closed) when the block ends."""
    parent = subprocess.Popen(
        [sys.executable, "-m", "tests.support.parent_script", model, kind, *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield parent
    finally:
        parent.kill()
        parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()


def wait_gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check_parent_sigkill(model: str, kind: str) -> None:
    child = 0
    with spawn_parent(model, kind) as parent:
        try:
            assert parent.stdout is not None
            line = parent.stdout.readline()
            assert line.startswith("child "), f"parent said {line!r}"
            child = int(line.split()[1])
            assert pid_alive(child)
            parent.kill()
            parent.wait(10)
            assert wait_gone(child, 5.0), "runner outlived its SIGKILLed parent"
        finally:
            if child:
                kill_quietly(child)
