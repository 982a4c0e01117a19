"""Fixtures for create tests: the route-test app and client, and a tiny GGUF on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import anyio_backend, app, client, hub, store  # noqa: F401
from tests.tinymodel import make_tiny_model


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return make_tiny_model(tmp_path / "files")
