"""``ps`` says which loaded model a reload would move, once the daemon probed again.

The stand-in for a GPU that appears while a model runs: an RPC worker (ggml treats its
devices as GPUs) that is down when the model loads, so the model loads on the CPU, and
comes up with its plugin; ``localllm backends build rpc`` then tells the daemon
(SIGHUP, server/reprobe.py), which plans the loaded model again (scheduler/moves.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from localllm.api.wire import PsEntry
from tests.gpu.test_rpc_reprobe import generate
from tests.support.daemon import Daemon, free_port, start_daemon
from tests.support.models import add_tiny
from tests.support.rpcworker import start_worker
from tests.support.tinymodel import expected_greedy

pytestmark = pytest.mark.gpu


def loaded(d: Daemon) -> PsEntry:
    r = generate(d)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == expected_greedy("abc", 4)
    (entry,) = httpx.get(d.url + "/api/ps", trust_env=False).json()["models"]
    return entry  # type: ignore[no-any-return]


def test_ps_names_the_model_a_reload_would_move(
    rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "backends"
    empty.mkdir(mode=0o755)
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
    monkeypatch.setenv("LOCALLLM_KEEP_ALIVE", "-1")
    monkeypatch.setenv("LOCALLLM_RPC_WORKERS", endpoint)
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(empty))
    add_tiny(tmp_path, "tiny", n_layer=8)
    with start_daemon(tmp_path) as d:
        # The worker is down: the model loads on the CPU alone, and stays there.
        before = loaded(d)
        assert set(before["devices"]) == {"CPU"} and "would_move" not in before
        with start_worker(rpc_backends, tmp_path, port=port) as w:
            built = d.cli("backends", "build", "rpc", "--yes", timeout=300)
            assert built.returncode == 0, built.stderr
            deadline = time.monotonic() + 30
            while "devices probed again" not in d.log.read_text():
                assert time.monotonic() < deadline, d.log.read_text()[-2000:]
                time.sleep(0.1)
            (entry,) = httpx.get(d.url + "/api/ps", trust_env=False).json()["models"]
            assert set(entry["devices"]) == {"CPU"}  # still where it loaded
            move = entry["would_move"]
            assert list(move["devices"]) == [w.endpoint] and move["devices"][w.endpoint] > 0
            assert f"tiny:latest would move to {w.device} (" in d.log.read_text()
            ps = d.cli("ps")
            assert ps.returncode == 0, ps.stderr
            assert (
                f"tiny:latest would move to GPU {w.endpoint} ({move['devices'][w.endpoint]} "
                "layers) on a reload: 'localllm stop tiny:latest'"
            ) in ps.stdout
            # The reload goes there, and the note goes with the old load.
            assert d.cli("stop", "tiny").returncode == 0
            after = loaded(d)
            assert w.endpoint in after["devices"] and "would_move" not in after
