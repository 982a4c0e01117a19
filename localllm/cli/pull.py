"""``localllm pull MODEL``: download a model through the daemon, one progress bar per layer."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("pull", help="Pull a model from Hugging Face")
    parser.add_argument("model", help="model name, e.g. hf.co/user/repo:Q4_K_M")
    parser.add_argument("--insecure", action="store_true", help="accepted for Ollama compatibility")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.cli.output import PullProgress

    progress = PullProgress()
    try:
        with Client(autostart=True) as client:
            for event in client.pull(args.model):
                progress.update(event)
    finally:
        progress.finish()
    return 0
