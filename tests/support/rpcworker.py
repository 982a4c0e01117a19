"""A GPU stand-in for CPU-only machines: ``localllm worker`` on loopback, serving its CPU.

ggml's RPC devices report themselves as GPUs with their own memory, so layers,
KV cache and planning all go through ggml's device machinery exactly as with
a real card.  The RPC plugin is built once (``localllm backends build rpc``,
about half a minute) into a folder shared by the whole run, outside every
test's LOCALLLM_HOME: ``$LOCALLLM_TEST_BACKENDS``, default
``~/.cache/localllm/test-backends``.  ``.ci/run`` builds it first through
the same command; a missing build here is built, never skipped.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localllm.hardware.rpc import query
from tests.support.daemon import free_port

REPO = Path(__file__).resolve().parents[2]


def backends_dir() -> Path:
    default = Path.home() / ".cache" / "localllm" / "test-backends"
    return Path(os.environ.get("LOCALLLM_TEST_BACKENDS") or default)


def ensure_rpc_plugin() -> Path:
    """The folder holding ``<ggml version>/libggml-rpc.so``, built here if it is missing."""
    root = backends_dir()
    root.mkdir(parents=True, exist_ok=True)
    # pytest-xdist workers may all get here first: one builds, the others wait for it.
    with open(root / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(root.glob("*/libggml-rpc.so")):
            env = {**os.environ, "LOCALLLM_BACKENDS": str(root)}
            out = subprocess.run(
                [sys.executable, "-m", "localllm", "backends", "build", "rpc"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert out.returncode == 0, (
                f"building the RPC plugin failed:\n{out.stdout}\n{out.stderr}"
            )
    return root


@dataclass
class Worker:
    endpoint: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def device(self) -> str:
        return f"RPC[{self.endpoint}]"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def worker_env(backends: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LOCALLLM_BACKENDS"] = str(backends)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@contextmanager
def start_worker(
    backends: Path, tmp: Path, *extra: str, port: int | None = None
) -> Iterator[Worker]:
    """A ``localllm worker`` on a free loopback port (or ``port``), ready when yielded,
    killed afterwards."""
    port = port or free_port()
    log = tmp / f"worker-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localllm",
                "worker",
                "--port",
                str(port),
                "--threads",
                "1",
                *extra,
            ],
            cwd=REPO,
            env=worker_env(backends),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    w = Worker(f"127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 60
        while not query(w.endpoint, timeout=1.0).ready:
            assert proc.poll() is None, f"worker exited {proc.returncode}: {w.output()}"
            assert time.monotonic() < deadline, f"worker did not come up: {w.output()}"
            time.sleep(0.1)
        yield w
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
