"""``localllm prune --partials``: run as a real command, without a daemon."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from localllm import paths
from localllm.server.serve import pid_file
from localllm.store.local import Store
from tests.support import forkserver

REPO = Path(__file__).resolve().parents[2]


def _prune(*flags: str) -> subprocess.CompletedProcess[str]:
    # LOCALLLM_HOME comes from the autouse fixture in tests/conftest.py.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return forkserver.run(["prune", *flags], env, cwd=REPO, timeout=60)


def _partial(n: int, size: int, *, age: float = 3600.0) -> Path:
    path = Store().blobs.partial_path("sha256:" + f"{n:02x}" * 32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_prune_partials_removes_them_and_says_how_many_bytes() -> None:
    a, b = _partial(1, 1000), _partial(2, 234)
    blob = Store().blobs.write_bytes(b"a complete blob stays")
    dry = _prune("--partials", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would free 1234 bytes" in dry.stdout and a.exists() and b.exists()
    r = _prune("--partials")
    assert r.returncode == 0, r.stderr
    assert f"removed {a.name}" in r.stdout and f"removed {b.name}" in r.stdout
    assert "freed 1234 bytes (1.2 KB) from 2 partial downloads" in r.stdout
    assert not a.exists() and not b.exists() and Store().blobs.exists(blob)
    again = _prune()  # --partials is the default
    assert "freed 0 bytes" in again.stdout


def test_prune_keeps_a_partial_a_live_process_is_writing() -> None:
    held, idle = _partial(1, 500), _partial(2, 70)
    with open(held, "r+b") as fh:  # this test's own process is "downloading" it
        fh.seek(0, os.SEEK_END)
        r = _prune("--partials")
    assert r.returncode == 0, r.stderr
    assert held.exists() and not idle.exists()
    assert f"kept {held.name}: open by a running process" in r.stdout
    assert "freed 70 bytes" in r.stdout


def test_prune_keeps_recent_partials_while_the_daemon_pid_is_alive() -> None:
    recent, old = _partial(1, 40, age=1), _partial(2, 60)
    pid_file().parent.mkdir(parents=True, exist_ok=True)
    pid_file().write_text(f"{os.getpid()}\n")  # a live "daemon": this test
    assert pid_file().parent == paths.run_dir()
    r = _prune("--partials")
    assert r.returncode == 0, r.stderr
    assert recent.exists() and not old.exists()
    assert f"(pid {os.getpid()})" in r.stdout and "freed 60 bytes" in r.stdout
