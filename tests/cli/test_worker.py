"""``localllm worker``: loopback by default, refuses to expose itself silently, stops cleanly."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from localllm.engine.rpc_worker import (
    CACHE_WARNING,
    EXPOSED_WARNING,
    check_cache_dir,
    is_loopback,
)
from localllm.hardware.rpc import query
from tests.support.daemon import free_port
from tests.support.rpcworker import REPO, start_worker, worker_env


def run_worker(backends: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localllm", "worker", *args],
        cwd=REPO,
        env=worker_env(backends),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_non_loopback_bind_needs_allow_remote(rpc_backends: Path) -> None:
    out = run_worker(rpc_backends, "--host", "0.0.0.0", "--port", str(free_port()))
    assert out.returncode == 2
    assert "refusing to bind 0.0.0.0" in out.stderr and "--allow-remote" in out.stderr
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("192.168.1.5") and not is_loopback("gpu-box")


def test_a_port_in_use_is_a_clear_error(rpc_backends: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        out = run_worker(rpc_backends, "--port", str(s.getsockname()[1]))
    assert out.returncode == 1 and "cannot listen on 127.0.0.1" in out.stderr


def test_an_unknown_device_is_refused(rpc_backends: Path) -> None:
    out = run_worker(rpc_backends, "--port", str(free_port()), "--device", "CUDA7")
    assert out.returncode != 0 and "no device CUDA7" in out.stderr and "CPU" in out.stderr


def test_without_the_rpc_plugin_it_says_how_to_build_it(tmp_path: Path) -> None:
    out = run_worker(tmp_path / "empty-backends", "--port", str(free_port()))
    assert out.returncode != 0 and "localllm backends build rpc" in out.stderr


def test_sigterm_stops_it_cleanly(rpc_backends: Path, tmp_path: Path) -> None:
    home = Path(os.environ["LOCALLLM_HOME"])
    with start_worker(rpc_backends, tmp_path, "--cache", str(tmp_path / "tcache")) as w:
        (state,) = (home / "run").glob("worker-*.json")
        assert str(w.proc.pid) in state.read_text()
        assert "local cache    : " + str(tmp_path / "tcache") in w.output()
        # Made for this user alone, and the worker says what a shared cache means.
        assert stat.S_IMODE((tmp_path / "tcache").stat().st_mode) == 0o700
        assert "WARNING: --cache: ggml keys cached tensors by a 64-bit FNV-1a hash" in w.output()
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(10) == 0
        assert "Worker stopped." in w.output()
        assert not state.exists()
        assert query(w.endpoint, timeout=0.5).state == "down"


# -- what an exposed worker and a shared cache mean --------------------------------------


def test_the_exposed_warning_says_remote_code_execution() -> None:
    text = EXPOSED_WARNING.format(addr="0.0.0.0:50052", user="user alice")
    assert "read and write this worker's memory" in text
    assert "remote code execution as user alice" in text
    assert "{" not in CACHE_WARNING.format(addr="a:1", path="/c")


def test_a_cache_others_can_write_is_refused_before_anything_starts(tmp_path: Path) -> None:
    # ggml serves any file in the cache folder whose name a client asks for: a file
    # planted there by another user needs no hash collision at all.
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o777)
    out = run_worker(
        tmp_path / "empty-backends", "--port", str(free_port()), "--cache", str(shared)
    )
    assert out.returncode == 2, out.stderr
    assert "writable by other users (mode 777)" in out.stderr and "chmod go-w" in out.stderr


def test_check_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made, why = check_cache_dir(str(tmp_path / "a" / "b"))
    assert why == "" and made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o700
    (tmp_path / "group").mkdir()
    (tmp_path / "group").chmod(0o770)
    assert "writable by other users" in check_cache_dir(str(tmp_path / "group"))[1]
    (tmp_path / "file").write_text("x")
    assert "cannot use" in check_cache_dir(str(tmp_path / "file"))[1]
    mine = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: mine + 1)
    assert "belongs to another user" in check_cache_dir(str(made))[1]
