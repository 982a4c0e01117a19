"""A runner never outlives its daemon, whatever the daemon died of."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

from localllm.runner import protocol as P
from tests.support.orphans import REPO, check_parent_sigkill, kill_quietly, spawn_parent, wait_gone
from tests.support.procs import children_of
from tests.support.runners import FAKE_ENV, pid_alive


def test_parent_sigkill_child_exits_fake() -> None:
    check_parent_sigkill("/m/fake.gguf", "fake")


def test_parent_sigkill_during_long_load_child_exits() -> None:
    # The child's main thread is busy (a 60 s "load"): the reader thread's
    # deadline must end it anyway.
    kids: list[int] = []
    with spawn_parent("/m/slowload.gguf", "fake", "--no-wait") as parent:
        try:
            assert parent.stdout is not None
            assert parent.stdout.readline().startswith("parent ")
            deadline = time.monotonic() + 15
            while not kids and time.monotonic() < deadline:
                time.sleep(0.1)
                kids = children_of(parent.pid)
            assert kids, "parent never spawned a runner"
            time.sleep(1.0)  # let it get into the load
            parent.kill()
            parent.wait(10)
            for kid in kids:
                assert wait_gone(kid, 8.0), "loading runner outlived its SIGKILLed parent"
        finally:
            for kid in kids:
                kill_quietly(kid)


def run_child(stdin_bytes: bytes, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "localllm.runner"],
        input=stdin_bytes,
        capture_output=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=30,
    )


def test_child_exits_on_stdin_eof_and_on_garbage() -> None:
    load = P.encode(P.load_msg(["/m/fake.gguf"], P.LoadOptions(n_threads=1)))
    # Load, then EOF without a shutdown: exits 0 after answering loaded.
    done = run_child(load, FAKE_ENV)
    assert done.returncode == 0
    stream = io.BytesIO(done.stdout)
    first = P.read_frame(stream)
    assert first is not None and first["type"] == "loaded"
    assert P.read_frame(stream) is None  # nothing but frames on stdout
    # Garbage instead of a load: a failed frame, a nonzero exit, no hang.
    bad = run_child(b"\x00\x00\x00\x05hello", FAKE_ENV)
    assert bad.returncode == 2
    failed = P.read_frame(io.BytesIO(bad.stdout))
    assert failed is not None and failed["type"] == "failed"
    assert "expected a load" in failed["failed"]["message"]
    # Garbage after loading: the child stops instead of guessing.
    worse = run_child(load + b"\xff\xff\xff\xff", FAKE_ENV)
    assert worse.returncode == 2 and b"bad frame" in worse.stderr


def test_no_stray_runners_left_by_this_session() -> None:
    assert not [p for p in children_of(os.getpid()) if pid_alive(p)]
