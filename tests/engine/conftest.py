"""Engine test fixtures: the tiny GGUFs (generated once per session) and an engine on one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from tests.support.engine_steps import opts
from tests.support.tinymodel import make_tiny_model


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_attn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny_attn"), attention=True)


@pytest.fixture
def engine(tiny: Path) -> Iterator[Engine]:
    with Engine([str(tiny)], opts(n_parallel=2)) as e:
        yield e
