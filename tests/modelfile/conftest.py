"""Fixtures for create tests: the route-test app and client, and a tiny GGUF on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tinymodel import make_tiny_model


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return make_tiny_model(tmp_path / "files")
