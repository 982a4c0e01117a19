"""The status line: model, context used / num_ctx, last reply's TTFT and tok/s, CPU/GPU."""

from __future__ import annotations

from dataclasses import dataclass

from textual.widgets import Static

from localllm.format import processor


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
        return " │ ".join(parts)


class StatusLine(Static):
    """Shows a ``Status``; call ``show`` after changing it."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self.status = Status()

    def show(self) -> None:
        self.update(self.status.text())
