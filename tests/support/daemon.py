"""The real daemon (``python -m localllm serve``) on a free loopback port, and the CLI run
against it.  Also a plugin (see tests/conftest.py): the ``daemon``, ``hub_daemon`` and
``tiny_daemon`` fixtures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.support import forkserver
from tests.support.home import isolate
from tests.support.hubstub import HubStub
from tests.support.models import add_tiny

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_env(port: int, **extra: str) -> dict[str, str]:
    """The test's environment (LOCALLLM_HOME from the autouse fixture) plus the daemon address."""
    env = dict(os.environ)
    env["LOCALLLM_HOST"] = f"127.0.0.1:{port}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def wait_until_up(
    url: str, proc: forkserver.Forked | subprocess.Popen[bytes] | None = None, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        try:
            if httpx.get(url + "/", timeout=0.5, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"daemon at {url} did not come up")


def end_process(proc: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds: a child ends whatever it was doing."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@dataclass
class Daemon:
    url: str
    port: int
    env: dict[str, str]
    proc: forkserver.Forked
    log: Path
    # Clients made for this daemon, closed when it stops (no leaked sockets).
    clients: list[Any] = field(default_factory=list)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, timeout=timeout)

    def keep(self, client: T) -> T:
        """Close ``client`` (anything with ``close()``) when the daemon stops."""
        self.clients.append(client)
        return client


def run_cli(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m localllm ARGS``, forked from the warm server (tests/support/forkserver.py)."""
    return forkserver.run(list(args), env, cwd=REPO, timeout=timeout)


@contextmanager
def start_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """``localllm serve`` on a free port with the test's environment, stopped afterwards."""
    port = free_port()
    env = cli_env(port)
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = forkserver.spawn(["serve"], env, cwd=REPO, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    d: Daemon | None = None
    try:
        wait_until_up(url, proc)
        d = Daemon(url, port, env, proc, log)
        yield d
    finally:
        for client in d.clients if d is not None else []:
            client.close()
        end_process(proc)


@contextmanager
def module_home(
    tmp_path_factory: pytest.TempPathFactory, name: str, *, home: str = "home", **env: str
) -> Iterator[Path]:
    """A fresh folder ``name`` for a module- or class-scoped fixture, its own LOCALLLM_HOME
    (``<folder>/<home>``) and ``env`` set until the block ends: store models, then start
    the daemon inside it."""
    tmp = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, tmp / home)
        for key, value in env.items():
            mp.setenv(key, value)
        yield tmp


@contextmanager
def own_daemon(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    stock: Callable[[Path], object],
    *,
    home: str = "home",
    **env: str,
) -> Iterator[Daemon]:
    """The daemon of a module- or class-scoped fixture: a fresh folder ``name`` with its own
    LOCALLLM_HOME and ``env`` set, the store filled by ``stock(folder)``, then ``serve``.

    The settings are undone once the daemon runs: it has its own copy, and the module's
    other tests must not inherit them."""
    tmp = tmp_path_factory.mktemp(name)
    mp = pytest.MonkeyPatch()
    with ExitStack() as stack:
        try:
            isolate(mp, tmp / home)
            for key, value in env.items():
                mp.setenv(key, value)
            stock(tmp)
            daemon = stack.enter_context(start_daemon(tmp))
        finally:
            mp.undo()
        yield daemon


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with start_daemon(tmp_path) as d:
        yield d


@pytest.fixture
def hub_daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A daemon that pulls from the Hub stand-in (HF_ENDPOINT is set before it starts)."""
    stub: HubStub = request.getfixturevalue("hub")
    assert stub.url
    with start_daemon(tmp_path) as d:
        yield d


@pytest.fixture
def tiny_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """The daemon with ``tiny`` (greedy-predictable) and ``tiny-embed`` (mean pooling) stored."""
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "4")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    add_tiny(tmp_path, "tiny")
    add_tiny(tmp_path, "tiny-embed", pooling="mean")
    with start_daemon(tmp_path) as daemon:
        yield daemon
