"""The CLI as a subprocess against the real daemon: list, show, cp, rm, serve, auto-start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from tests.support.daemon import REPO, Daemon, cli_env, free_port, run_cli, start_daemon, stop_pid
from tests.support.models import add_model

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)


def test_list_show_cp_rm(daemon: Daemon, tmp_path: Path) -> None:
    store = Store(paths.models())
    digest = add_model(store, tmp_path, "tiny")

    out = daemon.cli("list")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.strip().splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    assert len(rows) == 1
    name, ident, size, unit, *modified = rows[0].split()
    assert (name, ident) == ("tiny:latest", digest.removeprefix("sha256:")[:12])
    assert unit in ("B", "KB", "MB") and float(size) > 0
    assert " ".join(modified).endswith("ago")

    show = daemon.cli("show", "tiny")
    assert show.returncode == 0, show.stderr
    text = show.stdout
    for pattern in [
        r"architecture\s+llama",
        r"context length\s+2048",
        r"embedding length\s+64",
        r"quantization\s+F32",
        r"parameters\s+\S+",
    ]:
        assert re.search(pattern, text), (pattern, text)
    assert "License" in text and "MIT License" in text
    assert "Template" in text and "completion" in text

    assert daemon.cli("show", "tiny", "--template").stdout == "{{ .System }} {{ .Prompt }}\n"
    assert daemon.cli("show", "tiny", "--system").stdout == "You are terse.\n"
    assert daemon.cli("show", "tiny", "--license").stdout.startswith("MIT License\n")
    assert '"<|end|>"' in daemon.cli("show", "tiny", "--parameters").stdout
    assert daemon.cli("show", "tiny", "--modelfile").stdout.startswith("# Modelfile")

    cp = daemon.cli("cp", "tiny", "other:v2")
    assert (cp.returncode, cp.stdout.strip()) == (0, "copied 'tiny' to 'other:v2'")
    assert {r.split()[0] for r in daemon.cli("ls").stdout.splitlines()[1:]} == {
        "tiny:latest",
        "other:v2",
    }

    rm = daemon.cli("rm", "tiny", "missing", "other:v2")
    assert rm.returncode == 1
    assert rm.stdout.splitlines() == ["deleted 'tiny'", "deleted 'other:v2'"]
    assert "not found" in rm.stderr
    assert daemon.cli("list").stdout.strip() == "NAME    ID    SIZE    MODIFIED"
    assert not any(store.blobs.digests())


def test_cli_errors_are_messages_and_exit_codes(daemon: Daemon) -> None:
    missing = daemon.cli("show", "nothing-here")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Error: model 'nothing-here:latest' not found"
    bad = daemon.cli("cp", "../x", "y")
    assert bad.returncode == 1 and "invalid" in bad.stderr
    assert "Traceback" not in bad.stderr + missing.stderr


def test_daemon_writes_pid_file_and_refuses_a_busy_port(daemon: Daemon) -> None:
    pid_file = paths.run_dir() / "localllm.pid"
    assert pid_file.read_text().strip() == str(daemon.proc.pid)
    second = run_cli("serve", env=daemon.env, timeout=60)
    assert second.returncode == 1
    assert f"127.0.0.1:{daemon.port}" in second.stderr
    assert "in use" in second.stderr.lower()
    assert "Traceback" not in second.stderr
    daemon.proc.terminate()
    assert daemon.proc.wait(20) == 0
    assert not pid_file.exists()


def test_cli_autostarts_the_daemon() -> None:
    port = free_port()
    env = cli_env(port)
    pid_file = paths.run_dir() / "localllm.pid"
    try:
        out = run_cli("list", env=env, timeout=90)
        assert out.returncode == 0, out.stderr
        assert "Starting localllm daemon" in out.stderr
        assert out.stdout.split() == ["NAME", "ID", "SIZE", "MODIFIED"]
        assert httpx.get(f"http://127.0.0.1:{port}/", trust_env=False).text == "localllm is running"
        assert (paths.logs() / "server.log").is_file()
        # A second command finds it running and says nothing about starting.
        again = run_cli("list", env=env, timeout=60)
        assert again.returncode == 0 and "Starting" not in again.stderr
    finally:
        if pid_file.is_file():
            stop_pid(int(pid_file.read_text()))


def test_pull_then_list_and_show(hub_daemon: Daemon) -> None:
    out = hub_daemon.cli("pull", "hf.co/someone/Tiny-GGUF")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines[0] == "pulling manifest"
    assert lines[-1] == "success"
    bars = [ln for ln in lines if re.match(r"pulling [0-9a-f]{12}: 100% ", ln)]
    assert len(bars) == 1 and "▕" in bars[0]
    listed = hub_daemon.cli("list").stdout
    assert "hf.co/someone/Tiny-GGUF:latest" in listed
    show = hub_daemon.cli("show", "hf.co/someone/Tiny-GGUF")
    assert re.search(r"quantization\s+Q4_K_M", show.stdout), show.stdout

    missing = hub_daemon.cli("pull", "hf.co/someone/Missing-GGUF")
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1].startswith("Error: ")


def test_two_commands_auto_starting_at_once_both_succeed() -> None:
    env = cli_env(free_port())
    pid_file = paths.run_dir() / "localllm.pid"
    cmd = [sys.executable, "-m", "localllm", "list"]
    try:
        procs = [
            subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        results = [p.communicate(timeout=90) for p in procs]
        for proc, (out, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, err
            assert out.split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    finally:
        if pid_file.is_file():
            stop_pid(int(pid_file.read_text()))


def test_serve_prunes_old_unreferenced_blobs_at_start(tmp_path: Path) -> None:
    store = Store(paths.models())
    add_model(store, tmp_path, "kept")
    old = store.blobs.write_bytes(b"orphan from a crashed pull")
    young = store.blobs.write_bytes(b"orphan of a pull still running")
    two_hours_ago = time.time() - 7200
    os.utime(store.blobs.path(old), (two_hours_ago, two_hours_ago))
    with start_daemon(tmp_path):
        pass
    assert not store.blobs.exists(old)
    assert store.blobs.exists(young)
    assert len(store.list()) == 1
    for layer in store.list()[0].manifest.layers:
        assert store.blobs.exists(layer.digest)
