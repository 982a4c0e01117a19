"""``backends pack rpc`` → ``backends remove rpc`` → ``backends install`` → the RPC tests pass.

All through the command, on a copy of the RPC plugin CI builds (the shared
folder of tests/support/rpcworker.py is only read): the plugin installed from the pack
loads, ``list`` says which pack it came from, and then tests/gpu/test_rpc_engine.py
runs, in its own pytest, with that folder as its backends folder: workers
started from the installed plugin hold layers and match the CPU's greedy text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import REPO, run_cli
from tests.support.packs import copy_backends

pytestmark = pytest.mark.slow  # about 12 s, most of it the RPC tests


def test_pack_remove_install_and_the_rpc_tests_pass_on_it(
    rpc_backends: Path, tmp_path: Path
) -> None:
    root, version = copy_backends(rpc_backends, tmp_path / "backends")
    env = {
        **os.environ,
        "LOCALLLM_BACKENDS": str(root),
        "LOCALLLM_CACHE": str(tmp_path / "c"),
        "PYTHONPATH": str(REPO),
    }

    out = run_cli("backends", "pack", "rpc", "-o", str(tmp_path / "packs"), env=env)
    assert out.returncode == 0, out.stderr
    (file,) = (tmp_path / "packs").iterdir()
    sha = re.search(r"^sha256 ([0-9a-f]{64})$", out.stdout, re.MULTILINE)
    assert sha and f"--trust {sha.group(1)}" in out.stdout

    out = run_cli("backends", "remove", "rpc", env=env)
    assert out.returncode == 0 and "Removed" in out.stdout
    assert not list(root.rglob("libggml-rpc.so"))

    out = run_cli("backends", "install", str(file), env=env)
    assert out.returncode == 1 and "not in this localllm's table" in out.stderr
    out = run_cli("backends", "install", str(file), "--trust", sha.group(1), env=env)
    assert out.returncode == 0, out.stderr
    assert "Installed rpc" in out.stdout and "Loaded:" in out.stdout

    out = run_cli("backends", "list", "--json", env=env)
    row = {r["name"]: r for r in json.loads(out.stdout)}["rpc"]
    assert row["loaded"] and row["ggml_version"] == version
    assert row["pack"].startswith(str(file)) and not [
        r for r in json.loads(out.stdout) if r.get("stray")
    ]
    out = run_cli("backends", "list", env=env)
    assert f"(from {file}, sha256 {sha.group(1)[:12]})" in out.stdout

    # With plugin autoloading off (.ci/run names the plugins instead), pytest-timeout
    # would be missing and the run would refuse pyproject's ``timeout`` option.
    rpc_env = {k: v for k, v in env.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    rpc_env["LOCALLLM_TEST_BACKENDS"] = str(root)
    rpc_tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/gpu/test_rpc_engine.py",
        ],
        cwd=REPO,
        env=rpc_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rpc_tests.returncode == 0, rpc_tests.stdout[-3000:]
    assert " passed" in rpc_tests.stdout and "skipped" not in rpc_tests.stdout
