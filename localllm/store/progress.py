"""Progress of a store operation, as Ollama's pull lines: the callback type, and the
throttle that reports one blob's bytes as they are copied, hashed or exported."""

from __future__ import annotations

from collections.abc import Callable

from localllm.api import wire

# Each event is one of Ollama's pull progress lines (the CLI shows them as bars).
Progress = Callable[[wire.Progress], None]
STEP = 8 << 20  # bytes between two lines of one blob


class BlobProgress:
    """Reports ``done`` bytes of one blob: a line every ``STEP`` bytes and at the end."""

    def __init__(
        self, progress: Progress | None, status: str, digest: str, total: int, *, shown: int = 0
    ) -> None:
        self.progress, self.status, self.digest, self.total = progress, status, digest, total
        self.shown = shown  # bytes at the last line

    def __call__(self, done: int) -> None:
        if self.progress is not None and (done - self.shown >= STEP or done == self.total):
            self.shown = done
            self.progress(
                {
                    "status": self.status,
                    "digest": self.digest,
                    "total": self.total,
                    "completed": done,
                }
            )
