"""``localllm prune [--partials] [--dry-run]``: free disk space the store holds for nothing.

``--partials`` (the default, and for now the only kind) removes the resumable
partial downloads (``blobs/sha256-<hex>-partial``) of pulls that were interrupted:
start-up keeps them so a pull can resume, which can hold gigabytes.  It runs
without the daemon (it only touches files) and never removes a partial that a
running process has open, nor a recent one while the daemon runs.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "prune",
        help="Remove interrupted partial downloads",
        description="Free disk space the store holds for nothing: partial "
        "downloads of interrupted pulls.",
    )
    parser.add_argument(
        "--partials",
        action="store_true",
        help="remove resumable partial downloads no process is writing (the default)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, remove nothing"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.format import format_bytes
    from localllm.models.service import prune_partials
    from localllm.server.serve import pid_file
    from localllm.store.local import Store

    report = prune_partials(Store(), pid_file(), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path, size in report.removed:
        print(f"{verb} {path.name} ({format_bytes(size)})")
    for path, why in report.kept:
        print(f"kept {path.name}: {why}")
    count = len(report.removed)
    noun = "partial download" if count == 1 else "partial downloads"
    freed = report.freed
    print(
        f"{'would free' if args.dry_run else 'freed'} {freed} bytes ({format_bytes(freed)}) "
        f"from {count} {noun}"
    )
    return 0
