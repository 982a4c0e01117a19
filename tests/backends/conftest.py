"""Fixtures of the backends tests: a package index on disk that is all pip can see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def pip_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty simple-API index (``<it>/simple``) that pip reads through a file:// URL,
    with pip's configuration files, find-links and extra indexes switched off: no test
    reaches the network.  The cache is the test's own."""
    root = tmp_path / "index"
    (root / "simple").mkdir(parents=True)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", (root / "simple").as_uri())
    for var in (
        "PIP_FIND_LINKS",
        "PIP_EXTRA_INDEX_URL",
        "PIP_NO_INDEX",
        "PIP_REQUIRE_HASHES",
        "PIP_CONSTRAINT",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    return root
