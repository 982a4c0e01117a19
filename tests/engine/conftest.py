"""Engine test fixtures: the tiny GGUFs (generated once per session) and a runner helper."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, Done, Event, Failed, LoadOptions, Piece
from tests.tinymodel import make_tiny_model


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_attn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny_attn"), attention=True)


def opts(**kw: object) -> LoadOptions:
    base: dict[str, object] = {"n_ctx": 256, "n_parallel": 1, "n_batch": 64, "n_ubatch": 64,
                               "n_threads": 1}
    base.update(kw)
    return LoadOptions(**base)  # type: ignore[arg-type]


@pytest.fixture
def engine(tiny: Path) -> Iterator[Engine]:
    with Engine([str(tiny)], opts(n_parallel=2)) as e:
        yield e


@dataclass
class Result:
    text: str = ""
    pieces: list[Piece] = field(default_factory=list)
    done: Done | None = None
    failed: Failed | None = None


def collect(events: list[Event], out: dict[str, Result]) -> None:
    for ev in events:
        r = out.setdefault(ev.id, Result())
        if isinstance(ev, Piece):
            assert r.done is None, "piece after done"
            r.pieces.append(ev)
            r.text += ev.text
        elif isinstance(ev, Done):
            r.done = ev
        else:
            r.failed = ev


def run(engine: Engine, *reqs: CompletionRequest, max_steps: int = 5000) -> dict[str, Result]:
    """Submit all requests at once and step until the engine is idle."""
    for r in reqs:
        engine.submit(r)
    out: dict[str, Result] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            break
        collect(engine.step(), out)
    assert not engine.has_work()
    return out


def run_one(engine: Engine, req: CompletionRequest) -> Result:
    return run(engine, req)[req.id]
