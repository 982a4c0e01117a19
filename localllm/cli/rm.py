"""``localllm rm MODEL [MODEL...]``: delete models (their unused blobs go with them)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("rm", help="Remove one or more models")
    parser.add_argument("models", nargs="+", metavar="MODEL")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.cli.termsafe import clean
    from localllm.errors import LocalLLMError

    failed = 0
    with Client(autostart=True) as client:
        for model in args.models:
            try:
                client.delete(model)
            except LocalLLMError as exc:
                # Keep going: one missing name should not spare the others.
                print(f"Error: {clean(str(exc))}", file=sys.stderr)
                failed += 1
                continue
            print(f"deleted '{model}'")
    return 1 if failed else 0
