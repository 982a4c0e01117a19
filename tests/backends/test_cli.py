"""``localllm backends`` as a user runs it: list (text and JSON), bogus files, remove.

The build itself runs once per test session through the same command
(tests/support/rpcworker.py, and first of all in .ci/run); here the built plugin is
copied into this test's own backends folder.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import REPO, run_cli


def cli(backends: Path, *args: str) -> tuple[int, str, str]:
    import os

    env = dict(os.environ)
    env["LOCALLLM_BACKENDS"] = str(backends)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    out = run_cli(*args, env=env)
    return out.returncode, out.stdout, out.stderr


def test_list_shows_rpc_built_and_loaded(backends: Path) -> None:
    rc, out, err = cli(backends, "backends", "list", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    rpc = rows["rpc"]
    assert rpc["built"] and rpc["loaded"] and rpc["error"] == ""
    assert rpc["path"].endswith("libggml-rpc.so") and rpc["size"] > 0
    assert rpc["ggml_version"] == next(backends.iterdir()).name
    assert not rows["cuda"]["built"] and not rows["cuda"]["loaded"]
    rc, text, _ = cli(backends, "backends", "list")
    assert rc == 0 and "rpc" in text and "loaded" in text


def test_bogus_files_are_reported_not_fatal(backends: Path) -> None:
    version = next(backends.iterdir())
    (version / "libggml-cuda.so").write_bytes(b"\x7fELF garbage, not a plugin")
    (version / "notes.txt").write_text("hello")
    (backends / "0.0.1").mkdir()
    (backends / "0.0.1" / "libggml-rpc.so").write_bytes(b"old")
    rc, out, err = cli(backends, "backends", "list", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    by_name = {r["name"]: r for r in rows}
    assert by_name["rpc"]["loaded"]
    cuda = by_name["cuda"]
    assert cuda["built"] and not cuda["loaded"] and cuda["error"]
    strays = {Path(r["path"]).name: r["error"] for r in rows if r.get("stray")}
    assert "not a plugin file" in strays["notes.txt"]
    assert "built for ggml 0.0.1" in strays["0.0.1"] and "ignored" in strays["0.0.1"]
    rc, text, _ = cli(backends, "doctor")
    assert "libggml-cuda.so: FAILED" in text and "libggml-rpc.so: loaded (RPC)" in text


def test_remove_deletes_the_plugin(backends: Path) -> None:
    rc, out, _ = cli(backends, "backends", "remove", "rpc")
    assert rc == 0 and "Removed" in out
    assert not list(backends.glob("*/libggml-rpc.so"))
    rc, _, err = cli(backends, "backends", "remove", "rpc")
    assert rc == 1 and "No rpc plugin" in err
    rc, _, err = cli(backends, "backends", "build", "opencl")
    assert rc != 0 and "unknown backend 'opencl'" in err


def test_a_plugin_in_a_folder_others_can_write_is_refused_and_shown(backends: Path) -> None:
    """Loading a plugin runs its code: one that another account could have replaced is
    never opened, and list, doctor and a runner's worker setup all say why and how to fix."""
    version = next(backends.iterdir())
    version.chmod(0o775)
    rc, out, err = cli(backends, "backends", "list", "--json")
    assert rc == 0, err
    rpc = {r["name"]: r for r in json.loads(out)}["rpc"]
    assert rpc["built"] and not rpc["loaded"]
    assert rpc["error"] == (
        f"refusing to load {version / 'libggml-rpc.so'}: {version} is "
        f"writable by its group (mode 775): run 'chmod go-w {version}'"
    )
    rc, text, _ = cli(backends, "backends", "list")
    assert "FAILED" in text and f"chmod go-w {version}" in text
    rc, text, _ = cli(backends, "doctor")
    assert "libggml-rpc.so: FAILED: refusing to load" in text and "chmod go-w" in text
    # A model placed on an RPC worker: the runner's setup names the refusal, not "not built".
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"
        env = {
            **os.environ,
            "LOCALLLM_BACKENDS": str(backends),
            "PYTHONPATH": str(REPO),
            "PYTHONSAFEPATH": "1",
        }
        probe = subprocess.run(
            [sys.executable, "-m", "localllm.engine.probe_child", "--rpc", endpoint],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    (worker,) = report["workers"]
    assert worker["devices"] == 0
    assert worker["error"].startswith("the RPC backend plugin did not load: refusing to load")
    # The fix the message names works.
    version.chmod(0o755)
    rc, out, _ = cli(backends, "backends", "list", "--json")
    assert {r["name"]: r for r in json.loads(out)}["rpc"]["loaded"]
