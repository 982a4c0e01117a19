"""children: every child imports this localllm and, when asked, dies with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from localllm import children
from tests.support.runners import pid_alive

REPO = Path(__file__).resolve().parents[1]

# A parent that starts a sleeping child the way the daemon starts its children,
# prints the child's pid, and waits to be killed.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from localllm import children
    child = subprocess.Popen(
        [sys.executable, "-c",
         "from localllm.children import adopt; adopt(); import time; time.sleep(60)"],
        env=children._env(None, dies_with_parent=DIES))
    print(child.pid, flush=True)
    time.sleep(60)
""")


def start(dies: bool) -> tuple[subprocess.Popen[str], int]:
    env = children.child_env()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.replace("DIES", str(dies))],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.stdout.close()
    return parent, pid


def test_a_child_that_must_die_with_its_parent_does_on_kill_9() -> None:
    parent, child = start(True)
    time.sleep(0.5)  # the child has armed its death signal
    assert pid_alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while pid_alive(child):
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.05)


def test_a_background_child_outlives_its_parent() -> None:
    parent, child = start(False)
    time.sleep(0.5)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    time.sleep(0.5)
    try:
        assert pid_alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


def test_children_import_this_localllm(tmp_path: Path) -> None:
    out = children.run(
        "localllm", "--version", capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert out.returncode == 0 and out.stdout.startswith("localllm ")
    assert children.child_env()["PYTHONPATH"].split(os.pathsep)[0] == children.PACKAGE_ROOT


def test_a_localllm_folder_in_the_working_directory_is_not_imported(tmp_path: Path) -> None:
    # `python -m` puts the working directory first on sys.path, before PYTHONPATH: a
    # child started inside a source checkout (another version, no native module
    # built) would import that one instead of its parent's.
    decoy = tmp_path / "localllm"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    (decoy / "__main__.py").write_text("raise SystemExit('the decoy was imported')\n")
    out = children.run(
        "localllm", "--version", capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("localllm ")


HOSTILE = ("json", "struct", "socket", "cffi", "platform")


def plant_decoys(folder: Path) -> Path:
    """Modules a child imports (stdlib, cffi, localllm itself) as files in ``folder``, each
    leaving a mark when imported; returns the mark's folder."""
    marks = folder / "marks"
    marks.mkdir()
    for name in HOSTILE:
        (folder / f"{name}.py").write_text(
            f"open({str(marks / name)!r}, 'w').close()\nraise SystemExit('decoy {name}')\n"
        )
    decoy = folder / "localllm"
    decoy.mkdir()
    for part in ("__init__.py", "__main__.py"):
        (decoy / part).write_text(
            f"open({str(marks / 'localllm')!r}, 'w').close()\nraise SystemExit('decoy')\n"
        )
    return marks


def test_the_probe_and_runner_children_ignore_modules_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon starts its children in its own working directory, which is wherever
    # the user ran `localllm serve`: a json.py there must not run in the runner.
    # (Python 3.10 ignores PYTHONSAFEPATH, which is why 3.11 is the floor.)
    from localllm.hardware.detect import run_probe
    from localllm.runner.messages import LoadOptions
    from localllm.runner.process import RunnerProcess
    from tests.support.runners import FAKE_ENV, arun, collect, greedy

    marks = plant_decoys(tmp_path)
    monkeypatch.chdir(tmp_path)
    answer = run_probe(timeout=120)
    assert answer["ok"] is True, answer
    assert answer["devices"]

    async def go() -> str:
        runner = await RunnerProcess.start(
            ["/m/fake.gguf"], LoadOptions(n_ctx=64, n_threads=1), env=FAKE_ENV
        )
        try:
            return (await collect(runner, greedy("a", "x", 2)))[0]
        finally:
            await runner.close()

    assert arun(go()) == "0 1 "
    assert sorted(p.name for p in marks.iterdir()) == []
