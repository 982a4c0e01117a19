"""The GPU hint on the user's path: ``run`` and ``serve`` in a terminal name the command
that would put an unused GPU to work, once a day, and ``LOCALLLM_NO_HINTS`` silences it.

The simulated device: a stand-in ``nvidia-smi`` first on the daemon's PATH
(tests/support/fake_gpu.py); no plugin serves that GPU, so the daemon's
``/api/version`` carries the line (``backends/advice.py``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from localllm.api.hint import DAY, state_file
from tests.support.daemon import Daemon, cli_env, free_port, run_cli, start_daemon
from tests.support.echo import in_terminal, read_fd_until
from tests.support.fake_gpu import GPU, fake_gpu
from tests.support.models import add_tiny

LINE_END = b"'localllm backends build cuda' to use it."


def hint_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if LINE_END.decode() in ln]


def shown_at() -> float:
    return float(json.loads(state_file().read_text())["gpu"])


def run_once(d: Daemon, **env: str) -> str:
    done = run_cli("run", "tiny", "hello", env={**d.env, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_run_names_the_command_once_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(tmp_path, monkeypatch)
    add_tiny(tmp_path, "tiny")
    with start_daemon(tmp_path) as d:
        (line,) = hint_lines(run_once(d))
        assert line == (
            f"The {GPU} is not used: no NVIDIA CUDA plugin is loaded. "
            "Run 'localllm backends build cuda' to use it."
        )
        version = httpx.get(d.url + "/api/version", trust_env=False).json()
        assert version["gpu_hint"] == line and version["version"]
        first = shown_at()
        assert abs(first - time.time()) < 300
        assert hint_lines(run_once(d)) == []  # the same day: quiet
        assert shown_at() == first
        # A day later it shows again, once.
        state_file().write_text(json.dumps({"gpu": first - DAY - 1}))
        assert len(hint_lines(run_once(d))) == 1
        assert hint_lines(run_once(d)) == []
        # LOCALLLM_NO_HINTS: nothing, and the day is not used up.
        state_file().write_text(json.dumps({"gpu": first - DAY - 1}))
        assert hint_lines(run_once(d, LOCALLLM_NO_HINTS="1")) == []
        assert shown_at() == first - DAY - 1


def test_no_line_without_an_unused_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALLLM_NO_HINTS", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi, whatever this machine has
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
    add_tiny(tmp_path, "tiny")
    with start_daemon(tmp_path) as d:
        assert hint_lines(run_once(d)) == []
        assert "gpu_hint" not in httpx.get(d.url + "/api/version", trust_env=False).json()
        assert not state_file().exists()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_serve_in_a_terminal_prints_it_once_a_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(tmp_path, monkeypatch)
    env = cli_env(free_port())
    with in_terminal(env, "serve") as (proc, fd):
        seen = read_fd_until(fd, LINE_END, timeout=60)
        assert b"The " + GPU.encode() + b" is not used" in seen
        stop(proc)
    # Started again the same day: the log has the longer hint, the terminal no extra line.
    with in_terminal(env, "serve") as (proc, fd):
        seen = read_fd_until(fd, b"NVIDIA GPU found", timeout=60)
        seen = read_fd_until(fd, b"doctor --fix", seen, timeout=10)
        assert LINE_END not in seen
        stop(proc)
