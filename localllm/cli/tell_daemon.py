"""Tell a running daemon that its backend plugins changed (``localllm backends ...``).

The daemon of this data folder's pid file gets SIGHUP and probes its devices again
(server/reprobe.py), so the next load plans with the new plugin, no restart.  The
pid file may be stale and its number reused by another program, which SIGHUP would
end: the signal goes only while the file is locked, which the daemon holds for as
long as it lives (server/serve.py).  A daemon run by another account (a system
service) cannot be signalled by this user: the message says to restart it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _live_pid(path: Path) -> int | None:
    """The pid in ``path`` if a live daemon holds the file's lock, else None."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        with open(path) as f:
            pid = int(f.read().split()[0])
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return pid  # held: its daemon is alive
            return None  # nobody holds it: stale
    except (OSError, ValueError, IndexError):
        return None


def tell_daemon(what: str) -> None:
    """Ask the running daemon, if any, to probe again after ``what`` (one line printed)."""
    from localllm.server.serve import pid_file

    if not hasattr(signal, "SIGHUP"):
        return
    pid = _live_pid(pid_file())
    if pid is None or pid == os.getpid():
        return  # no daemon: the next one probes at its start
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        return
    except PermissionError:
        print(
            f"The running daemon (pid {pid}) belongs to another user: restart it to use the "
            f"{what} plugin (e.g. sudo systemctl restart localllm).",
            file=sys.stderr,
        )
        return
    print(f"The running daemon (pid {pid}) probes its devices again: the next load uses them.")
