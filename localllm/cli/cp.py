"""``localllm cp SOURCE DESTINATION``: give a model a second name (no bytes are copied)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("cp", help="Copy a model")
    parser.add_argument("source")
    parser.add_argument("destination")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client

    with Client(autostart=True) as client:
        client.copy(args.source, args.destination)
    print(f"copied '{args.source}' to '{args.destination}'")
    return 0
