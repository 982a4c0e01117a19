"""The engine as the runner child sees it: the ``Protocol`` its worker drives.

``localllm.engine.engine.Engine`` implements it, and so do the tests' stand-ins
(``LOCALLLM_RUNNER_ENGINE``, ``config.RUNNER_ENGINE``), which provoke what the real
engine should never do (crashes, slow loads).  The worker (``runner.worker``) knows
only this, so what it may call is written here once.  Nothing here imports the
engine: the engine sits below the runner and names no module of it but
``runner.messages`` (tests/test_import_boundary.py), so the check that ``Engine``
has every member, with these parameters, is a test (tests/runner/test_engine_api.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from localllm.runner.messages import CompletionRequest, Event, LoadOptions, PairFormat


class AdapterLoads(Protocol):
    """The engine's LoRA adapters, as far as the runner reports their loads."""

    def take_loads(self) -> list[tuple[str, int]]:
        """Adapters loaded since the last call, with their load time in ns."""
        ...


@runtime_checkable
class EngineAPI(Protocol):
    """One loaded model, driven from the runner's one engine thread.

    ``submit`` and ``cancel`` queue work; ``step`` does one batch of it and returns the
    events (a ``Failed`` for a request that failed alone); the other calls run between
    steps.  A method that raises fails its message's request; ``step`` raising ends the
    runner (the engine's state is unknown then).
    """

    @property
    def adapters(self) -> AdapterLoads: ...

    def submit(self, req: CompletionRequest) -> None: ...

    def cancel(self, req_id: str) -> None: ...

    def has_work(self) -> bool:
        """Whether ``step`` has something to do (the worker blocks on its inbox when not)."""
        ...

    def step(self) -> list[Event]: ...

    def embed(
        self, inputs: list[str], *, truncate: bool = True
    ) -> tuple[Sequence[Sequence[float]], int]:
        """Pooled embeddings of each input, and the tokens read."""
        ...

    def rerank(
        self, query: str, documents: list[str], fmt: PairFormat, *, truncate: bool = True
    ) -> tuple[list[float], int]:
        """Each document's raw score against ``query``, and the tokens read."""
        ...

    def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        """Each prompt's options as ``log P(option | prompt)``, the prompts' tokens and
        the tokens decoded."""
        ...

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]: ...

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        """``special``: control tokens written out as text (``<s>``), else left out."""
        ...

    def info(self) -> Mapping[str, object]:
        """Facts about the load, passed to the daemon as they are (``RunnerProcess.info``)."""
        ...

    def memory_report(self) -> dict[str, dict[str, int]]:
        """Bytes per device and part (weights, kv, compute, ...) the load allocated."""
        ...

    def close(self) -> None: ...


# What ``LOCALLLM_RUNNER_ENGINE`` names: the engine's class, called with the model's
# files and its load options.
EngineFactory = Callable[[list[str], LoadOptions], EngineAPI]
