"""``localllm worker``: serve this machine's devices to other localllm daemons over ggml RPC.

The command's arguments only: the server itself (the loopback rule, the
tensor cache's checks, the warnings and the RPC loop) is ``engine/rpc_worker.py``,
which loads the native module, as ``serve`` defers to ``server/serve.py``.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("worker", help="Serve this machine's devices to other daemons (ggml RPC)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=50052, help="port (default 50052)")
    p.add_argument(
        "--device",
        action="append",
        default=[],
        metavar="NAME",
        help="device to serve (repeatable; default: every GPU, else the CPU)",
    )
    p.add_argument(
        "--cache",
        help="local tensor cache folder (llama.cpp's rpc-server -c); "
        "shared by every client: use it only when all of them are trusted",
    )
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: cores)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding a non-loopback address (unauthenticated!)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.engine.rpc_worker import serve

    return serve(
        args.host,
        args.port,
        devices=args.device,
        cache=args.cache,
        threads=args.threads,
        allow_remote=args.allow_remote,
    )
