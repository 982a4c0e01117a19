"""Finding child processes through /proc (no psutil), for crash, orphan and shutdown tests."""

from __future__ import annotations

import os


def children_of(ppid: int) -> list[int]:
    """Pids of the processes whose parent is ``ppid`` (the tests' own fork server aside)."""
    from tests.support.forkserver import server_pid

    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == ppid and int(entry) != server_pid():
            pids.append(int(entry))
    return pids


def runner_pids(daemon_pid: int) -> list[int]:
    """Pids of ``localllm.runner`` processes whose parent is ``daemon_pid``."""
    return [pid for pid in children_of(daemon_pid) if b"localllm.runner" in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
