"""The status line: model, context used / num_ctx, last reply's TTFT and tok/s, CPU/GPU,
and, once a day at most, the command that would put an unused GPU to work (api/hint.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.widgets import Static

from localllm.format import processor

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient

_COMMAND = re.compile(r"'(localllm backends \w+ \w+)'")


@dataclass
class Status:
    model: str = ""
    ctx_used: int | None = None
    num_ctx: int | None = None
    ttft: float | None = None
    tok_s: float | None = None
    size: int = 0
    size_vram: int = 0
    loaded: bool = False
    note: str = ""  # "generating…", "daemon unreachable", ...
    hint: str = ""  # the daemon's GPU hint, when it was due

    def text(self) -> str:
        parts = [self.model or "no model (Ctrl+O)"]
        if self.num_ctx:
            parts.append(f"ctx {self.ctx_used or 0}/{self.num_ctx}")
        if self.ttft is not None:
            parts.append(f"TTFT {self.ttft:.2f}s")
        if self.tok_s is not None:
            parts.append(f"{self.tok_s:.1f} tok/s")
        parts.append(processor(self.size, self.size_vram) if self.loaded else "not loaded")
        if self.note:
            parts.append(self.note)
        if self.hint:  # the command is what counts on a narrow line
            found = _COMMAND.search(self.hint)
            parts.append(f"GPU unused: {found.group(1)}" if found else self.hint)
        return " │ ".join(parts)


class StatusLine(Static):
    """Shows a ``Status``; call ``show`` after changing it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self.status = Status()
        self.hint_asked = False

    def show(self) -> None:
        self.update(self.status.text())

    def ask_hint(self, client: AsyncClient) -> None:
        """Once per app, when a model is loaded (the daemon knows its devices by then): the
        daemon's GPU hint, if it is due today; the line shows it when it comes."""
        if self.hint_asked:
            return
        self.hint_asked = True
        self.run_worker(self._fetch_hint(client), group="gpu-hint", exclusive=True)

    async def _fetch_hint(self, client: AsyncClient) -> None:
        from localllm.api.hint import line_for_status

        self.status.hint = await line_for_status(client)
        if self.status.hint:
            self.show()
