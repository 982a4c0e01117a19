"""``localllm create NAME [-f Modelfile] [-q q4_K_M]``: build a model from a Modelfile.

The Modelfile is parsed here, so syntax errors name their line before anything
is sent; local GGUF files are uploaded only when the daemon does not have them
already; the daemon's NDJSON statuses are shown as they arrive, with bars for
uploads and quantization.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from localllm.cli.output import PullProgress, bar


def register(sub: Any) -> None:
    parser = sub.add_parser("create", help="Create a model from a Modelfile")
    parser.add_argument("model", help="name of the new model")
    parser.add_argument(
        "-f", "--file", default="Modelfile", help="the Modelfile (default: ./Modelfile)"
    )
    parser.add_argument(
        "-q", "--quantize", metavar="TYPE", help="quantize the model: q4_K_M, q4_K_S, q8_0 or f16"
    )
    parser.set_defaults(func=run)


class CreateProgress(PullProgress):
    """PullProgress, with quantization counted in tensors rather than bytes."""

    def update(self, event: Mapping[str, Any]) -> None:
        status = str(event.get("status", ""))
        if status.startswith("quantizing") and event.get("total"):
            event = {**event, "digest": status}  # one bar, keyed by its status
        super().update(event)

    def _bar_line(self, key: str, status: str, completed: int, total: int) -> str:
        if not status.startswith("quantizing"):
            return super()._bar_line(key, status, completed, total)
        pct = 100 * completed // total
        return f"{status}: {pct:3d}% {bar(completed / total)} {completed}/{total} tensors"


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.errors import LocalLLMError
    from localllm.modelfile.parser import parse
    from localllm.modelfile.upload import build_request

    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LocalLLMError(f"cannot read {path}: {exc.strerror or exc}") from None
    mf = parse(text)
    progress = CreateProgress()
    try:
        with Client(autostart=True) as client:
            body = build_request(
                mf,
                args.model,
                path.resolve().parent,
                client,
                progress.update,
                quantize=args.quantize,
            )
            # An {"error": ...} line is raised by the client as a LocalLLMError.
            for event in client.create(body):
                progress.update(event)
    finally:
        progress.finish()
    return 0
