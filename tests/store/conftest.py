"""Fixtures for the store tests: a Store in the test's LOCALLLM_HOME and a local Hub stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.store import download
from localllm.store.local import Store
from tests.support.hubstub import HubStub


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def hubstub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    stub = HubStub(tmp_path / "hub").start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    # Retries stay fast in tests; the logic under test is the same.
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)
    try:
        yield stub
    finally:
        assert download.wait_idle(10.0), "a download thread outlived its test"
        stub.stop()
