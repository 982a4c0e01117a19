"""``localllm backends`` as a user runs it: list (text and JSON), bogus files, remove.

The build itself runs once per test session through the same command
(tests/rpcworker.py, and first of all in .ci/run); here the built plugin is
copied into this test's own backends folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import REPO, run_cli


@pytest.fixture
def backends(rpc_backends: Path, tmp_path: Path) -> Path:
    (src,) = rpc_backends.glob("*/libggml-rpc.so")
    root = tmp_path / "backends"
    (root / src.parent.name).mkdir(parents=True)
    shutil.copy2(src, root / src.parent.name / src.name)
    return root


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
