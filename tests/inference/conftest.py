"""A real daemon (real runner processes, real libllama) serving the tiny deterministic model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm import paths
from localllm.store.importer import import_gguf
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.cli.conftest import Daemon, start_daemon
from tests.tinymodel import make_tiny_model


def add_tiny(tmp_path: Path, name: str = "tiny", **variant: object) -> Path:
    folder = tmp_path / f"gguf-{name}"
    folder.mkdir(exist_ok=True)
    path = make_tiny_model(folder, **variant)  # type: ignore[arg-type]
    import_gguf(Store(paths.models()), parse_name(name), [path])
    return path


@pytest.fixture
def tiny_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """The daemon with ``tiny`` (greedy-predictable) and ``tiny-embed`` (mean pooling) stored."""
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "4")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    add_tiny(tmp_path, "tiny")
    add_tiny(tmp_path, "tiny-embed", pooling="mean")
    with start_daemon(tmp_path) as daemon:
        yield daemon
