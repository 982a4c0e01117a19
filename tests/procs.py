"""Finding a daemon's runner children through /proc (no psutil), for crash and shutdown tests."""

from __future__ import annotations

import os


def runner_pids(daemon_pid: int) -> list[int]:
    """Pids of ``localllm.runner`` processes whose parent is ``daemon_pid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == daemon_pid and b"localllm.runner" in cmd:
            pids.append(int(entry))
    return pids
