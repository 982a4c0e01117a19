"""``localllm serve``: run the daemon in the foreground (alias ``start``)."""

from __future__ import annotations

import argparse
from typing import Any


def _epilog() -> str:
    from localllm import config

    lines = ["environment variables:"]
    for setting in config.REGISTRY:
        lines.append(f"  {setting.name:<28} {setting.description}")
    return "\n".join(lines)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "serve",
        aliases=["start"],
        help="Start the localllm daemon",
        description="Start the localllm daemon (listens on LOCALLLM_HOST, "
        "default 127.0.0.1:11434).",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="RPC workers to place layers on (sets LOCALLLM_RPC_WORKERS)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    from localllm.server.serve import run as serve

    if getattr(args, "rpc", None):
        os.environ["LOCALLLM_RPC_WORKERS"] = args.rpc

    return serve()
