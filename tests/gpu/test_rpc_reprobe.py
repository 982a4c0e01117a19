"""A plugin built while the daemon runs is used for the next load, with no restart.

The daemon starts with an empty backends folder and an RPC worker configured: with no
RPC plugin it cannot reach the worker, and a load says which command fixes that.
``localllm backends build rpc`` (the worker's plugin is built already, so the build is
a copy from the build cache) then tells the daemon
(SIGHUP, server/reprobe.py), and the next load is placed on the worker, whose devices
ggml treats as GPUs: the stand-in for a GPU plugin that CI has.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import Daemon, start_daemon
from tests.support.models import add_tiny
from tests.support.rpcworker import start_worker
from tests.support.tinymodel import expected_greedy

pytestmark = pytest.mark.gpu


def generate(d: Daemon) -> httpx.Response:
    return httpx.post(
        d.url + "/api/generate",
        timeout=120,
        trust_env=False,
        json={
            "model": "tiny",
            "prompt": "abc",
            "stream": False,
            "raw": True,
            "options": {"temperature": 0, "num_predict": 4},
        },
    )


def places(d: Daemon) -> dict[str, int]:
    r = generate(d)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == expected_greedy("abc", 4)
    (entry,) = httpx.get(d.url + "/api/ps", trust_env=False).json()["models"]
    return dict(entry["devices"])


def test_a_plugin_built_meanwhile_serves_the_next_load(
    rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "backends"
    empty.mkdir(mode=0o755)
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
    with start_worker(rpc_backends, tmp_path) as w:
        monkeypatch.setenv("LOCALLLM_RPC_WORKERS", w.endpoint)
        monkeypatch.setenv("LOCALLLM_BACKENDS", str(empty))
        add_tiny(tmp_path, "tiny", n_layer=8)
        with start_daemon(tmp_path) as d:
            # No RPC plugin: the configured worker is out of reach, and the error says why.
            before = generate(d)
            assert "run 'localllm backends build rpc'" in before.text, before.text
            built = d.cli("backends", "build", "rpc", "--yes", timeout=300)
            assert built.returncode == 0, built.stderr
            assert "probes its devices again" in built.stdout, built.stdout
            deadline = time.monotonic() + 30
            while "devices probed again" not in d.log.read_text():
                assert time.monotonic() < deadline, d.log.read_text()[-2000:]
                time.sleep(0.1)
            assert w.endpoint in places(d)  # the same daemon, no restart
