"""The engine and the runner tests' stand-in both implement ``runner.engine_api.EngineAPI``.

mypy cannot check it: the engine imports nothing of the runner but its messages
(tests/test_import_boundary.py), so nothing in the package names both.  Here every
member of the protocol is looked up on a real engine (the tiny model) and on the
stand-in, and each method's parameters are compared, names, kinds and defaults.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.runner.engine_api import AdapterLoads, EngineAPI
from localllm.runner.messages import LoadOptions
from tests.support import tinymodel as tm
from tests.support.fake_engine import FakeEngine


def members(proto: type) -> list[str]:
    return sorted(
        name
        for name in vars(proto)
        if not name.startswith("_") and (callable(vars(proto)[name]) or name == "adapters")
    )


def parameters(fn: Callable[..., object]) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def check(engine: object) -> None:
    assert isinstance(engine, EngineAPI)
    for name in members(EngineAPI):
        if name == "adapters":
            loads = getattr(engine, name)
            assert callable(getattr(loads, "take_loads", None)), name
            assert parameters(type(loads).take_loads) == parameters(AdapterLoads.take_loads)
            continue
        want = parameters(getattr(EngineAPI, name))
        assert parameters(getattr(type(engine), name)) == want, name


def test_the_protocol_names_what_the_worker_calls() -> None:
    assert members(EngineAPI) == sorted(
        [
            "adapters",
            "cancel",
            "close",
            "detokenize",
            "embed",
            "has_work",
            "info",
            "memory_report",
            "rerank",
            "score",
            "step",
            "submit",
            "tokenize",
        ]
    )


def test_the_real_engine_implements_it(tmp_path: Path) -> None:
    path = tm.make_tiny_model(tmp_path)
    with Engine([str(path)], LoadOptions(n_ctx=128, n_threads=1, prompt_cache=0)) as engine:
        check(engine)


def test_the_stand_in_implements_it() -> None:
    check(FakeEngine(["/m/fake.gguf"], LoadOptions(n_ctx=64)))


def test_a_missing_parameter_is_caught() -> None:
    class Short(FakeEngine):
        def detokenize(self, tokens: list[int]) -> str:  # no ``special``
            return ""

    with pytest.raises(AssertionError, match="detokenize"):
        check(Short(["/m/fake.gguf"], LoadOptions(n_ctx=64)))
