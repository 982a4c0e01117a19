"""The ``Runner`` protocol: what the scheduler needs from one loaded model.

``RunnerProcess`` satisfies it; a fake in-process runner can too, so the
scheduler is unit-testable without spawning children.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from localllm.runner.messages import CompletionRequest, Done, LoadOptions, PairFormat, Piece


@runtime_checkable
class Runner(Protocol):
    """One loaded model.  All methods raise ``RunnerCrashed`` once it has died."""

    @property
    def pid(self) -> int: ...

    @property
    def info(self) -> Mapping[str, object]: ...

    @property
    def memory(self) -> dict[str, dict[str, int]]: ...

    @property
    def load_duration(self) -> int:
        """Nanoseconds from spawn to loaded."""
        ...

    @property
    def alive(self) -> bool: ...

    def complete(self, req: CompletionRequest) -> AsyncIterator[Piece | Done]:
        """Stream a generation; ``Failed`` arrives as a raised ``LocalLLMError``.

        Leaving the iteration early (``break``, ``aclose()``) cancels the request.
        """
        ...

    async def cancel(self, req_id: str) -> None: ...

    async def embed(
        self, inputs: list[str], truncate: bool = True
    ) -> tuple[Sequence[Sequence[float]], int]: ...

    async def rerank(
        self, query: str, documents: list[str], fmt: PairFormat, truncate: bool = True
    ) -> tuple[list[float], int]:
        """Each document's raw score against ``query`` (the classification head's first
        output) and the tokens read; only for a model loaded with ``rerank``."""
        ...

    async def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        """``log P(option | prompt)`` for each prompt's options, the prompts' tokens and
        the tokens decoded (engine/scoring.py)."""
        ...

    async def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]: ...

    async def detokenize(self, tokens: list[int], special: bool = False) -> str:
        """``special``: control tokens written out as text (``<s>``), else left out."""
        ...

    async def close(self) -> None: ...


class StartRunner(Protocol):
    """How the scheduler gets a runner, e.g. ``RunnerProcess.start``."""

    def __call__(
        self, model_paths: list[str], opts: LoadOptions, /, *, load_timeout: float | None = None
    ) -> Awaitable[Runner]: ...


if TYPE_CHECKING:
    # mypy checks that RunnerProcess is a Runner and its start a StartRunner.
    from localllm.runner.process import RunnerProcess

    _start: StartRunner = RunnerProcess.start
    _runner: type[Runner] = RunnerProcess
