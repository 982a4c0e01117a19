"""``localllm list`` (``ls``): the local models as a table NAME, ID, SIZE, MODIFIED."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("list", aliases=["ls"], help="List models")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.cli.output import table
    from localllm.format import format_bytes, parse_timestamp, time_ago

    with Client(autostart=True) as client:
        models = client.list()
    rows = [
        (
            str(m.get("name", "")),
            str(m.get("digest", ""))[:12],
            format_bytes(int(m.get("size") or 0)),
            time_ago(parse_timestamp(str(m.get("modified_at", "")))),
        )
        for m in models
    ]
    print(table(["NAME", "ID", "SIZE", "MODIFIED"], rows))
    return 0
