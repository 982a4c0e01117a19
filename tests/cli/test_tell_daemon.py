"""``tell_daemon`` signals only a live daemon: one that holds its pid file's lock.

A stale pid file whose number another program has by now must not get SIGHUP (its
default action ends that program)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from localllm.cli.tell_daemon import _live_pid

HOLD = """
import fcntl, sys, time
f = open(sys.argv[1])
fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep(60)
"""


def test_only_a_pid_whose_file_is_locked_is_live(tmp_path: Path) -> None:
    pid_path = tmp_path / "localllm.pid"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_path.write_text(f"{other.pid}\n")  # stale: nobody holds it
        assert _live_pid(pid_path) is None
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(pid_path)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            assert _live_pid(pid_path) == other.pid
        finally:
            holder.kill()
            holder.wait()
            if holder.stdout is not None:
                holder.stdout.close()
        assert _live_pid(pid_path) is None  # the holder is gone: stale again
    finally:
        other.kill()
        other.wait()
    assert _live_pid(tmp_path / "missing.pid") is None
