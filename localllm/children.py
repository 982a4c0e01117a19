"""One way to start a child ``python -m localllm...`` process: environment, argv, lifetime.

Every child (runner, hardware probe, quantize, a background daemon) must
import this same ``localllm`` — also from a source checkout that is not
installed — so ``PYTHONPATH`` gets this package's root and the working
directory is kept off ``sys.path``, and output is unbuffered so a crash loses
no log line.  ``dies_with_parent`` has the child
(through ``adopt()``, which every child entry point calls) ask Linux to SIGKILL
it when its parent dies (``PR_SET_PDEATHSIG``), so a ``kill -9`` of the daemon
cannot leave a quantize or a runner behind; a background daemon is started
without it, in its own session, by a double fork (``spawn_detached``), so it is
never the child of a program the command ``exec``s next.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
PARENT_ENV = "LOCALLLM_PARENT_PID"  # set for a child that must die with its parent
_PR_SET_PDEATHSIG = 1


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, set up so the child imports this same localllm."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # `python -m` would put the working directory ahead of PYTHONPATH: a child
    # started inside a localllm checkout would import that copy (Python 3.11+).
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra or {})
    return env


def argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def adopt() -> None:
    """In a child: die with the parent that asked for it (called first thing in ``main``).

    The child arms ``PR_SET_PDEATHSIG`` itself (a ``preexec_fn`` would run Python
    between fork and exec, which can deadlock a threaded parent), then checks
    that the parent is still the one that started it: one that died before the
    signal was armed would otherwise be missed.
    """
    parent = os.environ.pop(PARENT_ENV, "")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # the children's own EOF checks still end them
    if str(os.getppid()) != parent:
        os._exit(1)


def _env(env: dict[str, str] | None, dies_with_parent: bool) -> dict[str, str]:
    extra = dict(env or {})
    if dies_with_parent:
        extra[PARENT_ENV] = str(os.getpid())
    return child_env(extra)


def spawn(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    dies_with_parent: bool = True,
    **popen: Any,
) -> subprocess.Popen[Any]:
    """``python -m module args...`` as a ``subprocess.Popen``."""
    return subprocess.Popen(argv(module, *args), env=_env(env, dies_with_parent), **popen)


def spawn_detached(module: str, *args: str, env: dict[str, str] | None = None, log: Path) -> int:
    """``python -m module args...`` as nobody's child (POSIX): its pid.

    A double fork: an intermediate child starts a new session, forks the process
    and exits at once, so the process is re-parented to init and never becomes a
    child (a zombie when it exits first) of whatever this process ``exec``s next:
    ``localllm launch`` replaces itself with an agent after starting the daemon.
    Its stdin is /dev/null, its stdout and stderr go to ``log`` (appended), and it
    inherits no other descriptor (Python opens them non-inheritable).
    """
    command = argv(module, *args)
    environ = _env(env, dies_with_parent=False)
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:  # the intermediate: nothing here may return into the caller's code
        code = 1
        try:
            os.close(read_end)
            os.setsid()  # Ctrl-C in the caller's terminal must not reach it
            pid = os.fork()
            if pid == 0:
                try:
                    os.dup2(null, 0)
                    os.dup2(out, 1)
                    os.dup2(out, 2)
                    os.execve(command[0], command, environ)
                finally:
                    os._exit(127)
            os.write(write_end, str(pid).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    os.close(out)
    os.close(null)
    os.waitpid(middle, 0)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    if not text.isdigit():
        raise OSError(f"could not start {module}")
    return int(text)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (not a child: see ``spawn_detached``).  A zombie
    does not: where nobody reaps orphans, an exited daemon stays one."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): the signal check is all there is
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def run(
    module: str, *args: str, env: dict[str, str] | None = None, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """``python -m module args...`` to completion (``subprocess.run``'s keywords)."""
    return subprocess.run(argv(module, *args), env=_env(env, True), **kwargs)


async def spawn_async(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    dies_with_parent: bool = True,
    **kw: Any,
) -> asyncio.subprocess.Process:
    """``python -m module args...`` as an asyncio subprocess."""
    import asyncio  # here: the probe and runner children import this module, not asyncio

    return await asyncio.create_subprocess_exec(
        *argv(module, *args), env=_env(env, dies_with_parent), **kw
    )


def describe_exit(returncode: int | None) -> str:
    """How a child ended, for messages: "exit status 1", "signal 9, SIGKILL"."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"signal {-returncode}, {name}"
    return f"exit status {returncode}"
