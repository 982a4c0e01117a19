"""The tests' fork server behaves like ``subprocess`` for what the tests rely on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from localllm import __version__
from tests.support import forkserver
from tests.support.daemon import free_port


def test_run_reports_output_and_exit_status_like_subprocess() -> None:
    env = dict(os.environ)
    ok = forkserver.run(["--version"], env, timeout=30)
    assert (ok.returncode, ok.stdout.strip()) == (0, f"localllm {__version__}")
    bad = forkserver.run(["no-such-command"], env, timeout=30)
    fresh = subprocess.run(
        [sys.executable, "-m", "localllm", "no-such-command"],
        env=env,
        cwd=forkserver.REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_a_signalled_child_reads_as_popen_reads_it_and_the_server_is_no_test_child() -> None:
    env = dict(os.environ, LOCALLLM_HOST=f"127.0.0.1:{free_port()}")
    with open(os.devnull, "wb") as null:
        child = forkserver.spawn(["serve"], env, stdout=null, stderr=null)
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.05)
    child.send_signal(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL and child.poll() == -signal.SIGKILL
    from tests.support.procs import children_of

    assert forkserver.server_pid() not in children_of(os.getpid())
