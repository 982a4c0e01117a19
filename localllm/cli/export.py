"""``localllm export NAME… -o FILE``: models written to one archive, for ``localllm import``.

Runs in this process, without the daemon: it reads the store's manifests and blobs
(``store/archive.py`` says what the archive holds and why it is a tar,
``store/archive_export.py`` writes it).  ``-o -``
writes to standard output, for a pipe (``… | ssh host localllm import -``); then
the summary goes to stderr with the progress bars.  A file appears under its name
only once it is complete.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "export",
        help="Write models to an archive for another machine",
        description="Write models (manifests, blobs and a sha256 table) to one tar archive, "
        "for `localllm import FILE` on another machine, an air-gapped one included. "
        "Every blob is hashed as it is written: a damaged one stops the export.",
    )
    parser.add_argument("models", nargs="+", metavar="NAME", help="a model to export")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="the archive to write (- for standard output)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.cli.output import BLOB_PROGRESS_MIN, PullProgress
    from localllm.format import format_bytes
    from localllm.store.archive_export import export_models, write_file
    from localllm.store.local import Store
    from localllm.store.names import parse_name

    names = [parse_name(m) for m in args.models]
    store = Store()
    progress = PullProgress(min_total=BLOB_PROGRESS_MIN)

    to_stdout = args.output == "-"
    if to_stdout and sys.stdout.isatty():
        print(
            "Error: refusing to write an archive to a terminal; use -o FILE or a pipe",
            file=sys.stderr,
        )
        return 2
    failed = ""
    try:
        if to_stdout:
            report = export_models(store, names, sys.stdout.buffer, progress.update)
            sys.stdout.buffer.flush()
        else:
            report = write_file(
                args.output, lambda fh: export_models(store, names, fh, progress.update)
            )
    except OSError as exc:  # no such folder, a full disk, the reading end of a pipe gone
        failed = f"writing {args.output}: {exc.strerror or exc}"
    finally:
        progress.finish()
    if failed:
        print(f"Error: {failed}", file=sys.stderr)
        return 1
    where = "standard output" if to_stdout else args.output
    noun = "model" if len(report.models) == 1 else "models"
    print(
        f"exported {len(report.models)} {noun} ({', '.join(report.models)}): "
        f"{report.blobs} blobs, {format_bytes(report.bytes)}, to {where} "
        f"in {report.seconds:.2f} s",
        file=sys.stderr if to_stdout else sys.stdout,
    )
    return 0
