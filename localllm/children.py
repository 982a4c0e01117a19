"""One way to start a child ``python -m localllm...`` process: environment, argv, lifetime.

Every child (runner, hardware probe, quantize, a background daemon) must
import this same ``localllm`` — also from a source checkout that is not
installed — so ``PYTHONPATH`` gets this package's root, and output is
unbuffered so a crash loses no log line.  ``dies_with_parent`` asks Linux to
SIGKILL the child when the process that started it dies (``PR_SET_PDEATHSIG``),
so a ``kill -9`` of the daemon cannot leave a quantize or a runner behind; a
background daemon is started without it, in its own session.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
_PR_SET_PDEATHSIG = 1


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, set up so the child imports this same localllm."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the child's own EOF checks still end it


def _preexec(dies_with_parent: bool) -> Callable[[], None] | None:
    return _die_with_parent if dies_with_parent and sys.platform.startswith("linux") else None


def spawn(module: str, *args: str, env: dict[str, str] | None = None,
          dies_with_parent: bool = True, **popen: Any) -> subprocess.Popen[Any]:
    """``python -m module args...`` as a ``subprocess.Popen``."""
    return subprocess.Popen(argv(module, *args), env=child_env(env),
                            preexec_fn=_preexec(dies_with_parent), **popen)


def run(module: str, *args: str, env: dict[str, str] | None = None,
        **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``python -m module args...`` to completion (``subprocess.run``'s keywords)."""
    return subprocess.run(argv(module, *args), env=child_env(env),
                          preexec_fn=_preexec(True), **kwargs)


async def spawn_async(module: str, *args: str, env: dict[str, str] | None = None,
                      dies_with_parent: bool = True, **kw: Any) -> asyncio.subprocess.Process:
    """``python -m module args...`` as an asyncio subprocess."""
    return await asyncio.create_subprocess_exec(
        *argv(module, *args), env=child_env(env), preexec_fn=_preexec(dies_with_parent), **kw)
