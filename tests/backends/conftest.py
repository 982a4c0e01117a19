"""Fixtures of the backends tests: a package index on disk that is all pip can see, and a
backends folder holding a copy of the RPC plugin."""

from __future__ import annotations

import os
import shutil
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


@pytest.fixture
def backends(rpc_backends: Path, tmp_path: Path) -> Path:
    """A backends folder of the test's own with a copy of the built RPC plugin."""
    (src,) = rpc_backends.glob("*/libggml-rpc.so")
    root = tmp_path / "backends"
    (root / src.parent.name).mkdir(parents=True)
    shutil.copy2(src, root / src.parent.name / src.name)
    return root
