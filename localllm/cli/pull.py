"""``localllm pull MODEL``: download a model through the daemon, one progress bar per layer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localllm.api.client import Client


def register(sub: Any) -> None:
    parser = sub.add_parser("pull", help="Pull a model from Hugging Face")
    parser.add_argument("model", help="model name: a library name from 'localllm catalog' "
                                      "(llama3.2, qwen3:8b) or hf.co/user/repo[:Q4_K_M]")
    parser.add_argument("--insecure", action="store_true", help="accepted for Ollama compatibility")
    parser.add_argument(
        "--projector", metavar="FILE",
        help="vision projector to pull: a file name (mmproj-F32.gguf) or precision (F32), "
             "or 'none'; default: the model's precision, else F16")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client

    with Client(autostart=True) as client:
        pull_with_progress(client, args.model, projector=args.projector)
    return 0


def pull_with_progress(client: Client, model: str, projector: str | None = None) -> None:
    """Pull ``model`` through ``client``, drawing the bars on stderr (also ``run``'s auto-pull)."""
    from localllm.cli.output import PullProgress

    progress = PullProgress()
    try:
        for event in client.pull(model, projector):
            progress.update(event)
    finally:
        progress.finish()
