"""``localllm doctor``: placeholder until the native/devices report lands (another owner)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("doctor", help="Check the native engine and devices")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("localllm doctor is not available yet", file=sys.stderr)
    return 1
