"""The daemon placing models on RPC devices: plan, ps, unload, several workers, a dying worker.

Workers are ``localllm worker`` processes on loopback serving their CPU
(tests/support/rpcworker.py), the same stand-in for a GPU that CI has.  Issue 11's
loopback check is ``test_two_workers_and_the_cpu_share_a_model``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import Daemon, start_daemon
from tests.support.models import add_tiny
from tests.support.rpcworker import Worker, start_worker
from tests.support.tinymodel import expected_greedy

pytestmark = pytest.mark.gpu


def generate(d: Daemon, prompt: str, n: int = 12, **options: object) -> dict[str, object]:
    r = httpx.post(
        d.url + "/api/generate",
        timeout=120,
        trust_env=False,
        json={
            "model": "tiny",
            "prompt": prompt,
            "stream": False,
            "raw": True,
            "options": {"temperature": 0, "num_predict": n, **options},
        },
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def ps(d: Daemon) -> list[dict[str, object]]:
    return list(httpx.get(d.url + "/api/ps", trust_env=False).json()["models"])


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def env(rpc_backends: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(rpc_backends))
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    return rpc_backends


@pytest.fixture
def one_worker(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Daemon, Worker]]:
    with start_worker(env, tmp_path) as w:
        monkeypatch.setenv("LOCALLLM_RPC_WORKERS", w.endpoint)
        monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
        # 40 layers of ~2.6 MB: enough for the worker's memory to show the load.
        add_tiny(tmp_path, "tiny", n_layer=40)
        with start_daemon(tmp_path) as d:
            yield d, w


def test_model_offloads_to_the_worker_and_unloading_frees_its_memory(
    one_worker: tuple[Daemon, Worker],
) -> None:
    d, w = one_worker
    before = rss(w.proc.pid)
    out = generate(d, "abc")
    assert out["response"] == expected_greedy("abc", 12)
    (entry,) = ps(d)
    assert int(entry["size_vram"]) > 100 * 2**20  # type: ignore[call-overload]
    places = entry["devices"]
    assert isinstance(places, dict) and places[w.endpoint] > places.get("CPU", 0)
    row = d.cli("ps").stdout.splitlines()[1]
    assert f"% {w.endpoint}" in row and "% CPU" in row
    shown = d.cli("show", "tiny").stdout
    assert "  Loaded" in shown and f"% {w.endpoint}" in shown
    log = d.log.read_text()
    assert f"all 41 layers on RPC[{w.endpoint}]" in log
    loaded = rss(w.proc.pid)
    assert loaded - before > 100 * 2**20

    assert d.cli("stop", "tiny").returncode == 0
    deadline = time.monotonic() + 10
    while rss(w.proc.pid) - before > 0.2 * (loaded - before):
        assert time.monotonic() < deadline, (before, loaded, rss(w.proc.pid))
        time.sleep(0.1)
    # The worker serves the next client: the model loads on it again.
    assert generate(d, "xyz", 3)["response"] == expected_greedy("xyz", 3)


def test_two_workers_and_the_cpu_share_a_model(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with start_worker(env, tmp_path) as a, start_worker(env, tmp_path) as b:
        monkeypatch.setenv("LOCALLLM_RPC_WORKERS", f"{a.endpoint},{b.endpoint}")
        monkeypatch.setenv("LOCALLLM_SCHED_SPREAD", "1")
        add_tiny(tmp_path, "tiny", attention=True, n_layer=6, n_ctx_train=32768)
        with start_daemon(tmp_path) as d:
            # num_gpu 5 (llama.cpp's count: 4 layers + output) spread over both workers;
            # layers 0-1 stay on the CPU.
            out = generate(d, "abc", num_gpu=5, num_ctx=32768)
            assert out["response"] == expected_greedy("abc", 12)
            (entry,) = ps(d)
            places = entry["devices"]
            assert isinstance(places, dict)
            assert {a.endpoint, b.endpoint, "CPU"} <= set(places)
            row = d.cli("ps").stdout.splitlines()[1]
            assert a.endpoint in row and b.endpoint in row and "% CPU" in row

            # b dies mid-stream: the stream ends with an error naming it, within 10 s.
            with httpx.stream(
                "POST",
                d.url + "/api/generate",
                timeout=60,
                trust_env=False,
                json={
                    "model": "tiny",
                    "prompt": "A",
                    "raw": True,
                    "options": {
                        "temperature": 0,
                        "num_predict": 30000,
                        "num_gpu": 5,
                        "num_ctx": 32768,
                    },
                },
            ) as r:
                lines = r.iter_lines()
                first = json.loads(next(lines))
                assert first.get("response") == "A"
                os.kill(b.proc.pid, signal.SIGKILL)
                killed = time.monotonic()
                last: dict[str, object] = {}
                for line in lines:
                    last = json.loads(line)
                    if "error" in last or last.get("done"):
                        break
                waited = time.monotonic() - killed
            assert "error" in last, last
            assert b.endpoint in str(last["error"]), last
            assert waited < 10
            # How it ended and why, in one line; the backtrace stays in the daemon's log.
            assert last["error"] == (
                f"tiny:latest: model runner exited unexpectedly "
                f"(signal 6, SIGABRT): lost RPC worker {b.endpoint}"
            ), last

            # The daemon keeps serving; the next load plans without the dead worker.
            assert httpx.get(d.url + "/health", trust_env=False).status_code == 200
            out = generate(d, "abc", num_gpu=5, num_ctx=32768)
            assert out["response"] == expected_greedy("abc", 12)
            (entry,) = ps(d)
            places = entry["devices"]
            assert isinstance(places, dict)
            assert a.endpoint in places and b.endpoint not in places
            assert f"RPC worker {b.endpoint} is not usable" in d.log.read_text()


def test_a_worker_that_is_down_is_named_and_the_model_loads_locally(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.rpcworker import free_port

    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("LOCALLLM_RPC_WORKERS", dead)
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
    add_tiny(tmp_path, "tiny")
    with start_daemon(tmp_path) as d:
        assert generate(d, "abc")["response"] == expected_greedy("abc", 12)
        assert d.cli("ps").stdout.splitlines()[1].find("100% CPU") > 0
        log = d.log.read_text()
        assert f"RPC worker {dead} is not usable" in log
        doctor = d.cli("doctor", "--json")
        workers = json.loads(doctor.stdout)["workers"]
        assert workers == [
            {
                "endpoint": dead,
                "state": "down",
                "version": "",
                "error": workers[0]["error"],
                "devices": [],
            }
        ]
        assert "cannot connect" in workers[0]["error"]
