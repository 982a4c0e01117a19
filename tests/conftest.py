"""Test-wide fixtures: every test gets its own LOCALLLM_HOME and no stray settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.home import isolate

# Fixtures that more than one folder uses (the folders' own stay in their conftest.py).
pytest_plugins = ["tests.support.routes", "tests.support.hub", "tests.support.daemon"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with ``slow`` tests first, each module's own order kept.

    With ``--no-loadscope-reorder`` (``.ci/run``) pytest-xdist hands modules out in
    collection order.  Its own order, most tests first, left schemathesis (one 14 s
    test) to run alone at the end while the other workers had finished: 148 s against
    their 134 s.  Started first, the long modules run beside each other and the short
    ones fill the end.
    """
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Make the garbage collector cheap for the rest of the run.

    After collection a worker tracks some 230,000 objects (textual, schemathesis,
    hypothesis, the parametrised items) that live until it exits, and every full
    collection walks them all again.  Frozen, they are never walked; the higher
    threshold makes young collections rarer, which the tests' short-lived objects do
    not need.  Cycles are still collected, later.  On tui/test_chat, tui/test_snapshots
    and the schemathesis module: GC 5.1 s -> 2.0 s of 51 s, young collections
    3,022 -> 207.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "localllm-home"
    isolate(monkeypatch, home)
    yield home


@pytest.fixture(scope="session")
def rpc_backends() -> Path:
    """The shared backends folder with the RPC plugin built (see tests/support/rpcworker.py)."""
    from tests.support.rpcworker import ensure_rpc_plugin

    return ensure_rpc_plugin()
