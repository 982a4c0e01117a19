"""``localllm import ollama [PATH]`` and ``localllm import FILE``: models into the store.

``import ollama`` reuses the models of an Ollama store, nothing downloaded;
``import FILE`` (``-`` for standard input) brings in an archive written by
``localllm export`` (``store/archive_import.py``).  Anything but the word
``ollama`` is an archive's path (``./ollama`` for a file of that name).

The module is ``importer`` because ``import`` is a Python keyword; the command is
``import``.  It runs in this process, without the daemon: it reads Ollama's folder
or the archive and adds blobs and manifests to localllm's store, which the daemon
lists at once (the local store: ``LOCALLLM_HOST`` pointing at another machine changes
nothing here).  Progress bars go to stderr; one line per model and a summary to
stdout.  Exit status 1 when any model failed (a broken entry, or a name already
taken), or the archive was refused or cut short.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localllm.store.archive_import import ArchiveReport
    from localllm.store.ollama_import import ImportReport


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "import",
        help="Import the models of an Ollama store or of an archive",
        description="`import ollama [PATH]`: bring in every model of an Ollama store "
        "(weights, projectors, adapters, templates, system prompts, parameters, "
        "messages, licenses) under its Ollama name. Blobs are hard-linked when both "
        "stores are on one filesystem (no bytes copied), else copied; every blob is "
        "checked against its sha256. The Ollama store is never modified. "
        "`import FILE`: bring in the models of an archive written by `localllm export` "
        "(- reads standard input). Every digest is checked before any model is listed; "
        "run it again after an interrupted copy and it carries on where it stopped.",
    )
    parser.add_argument(
        "source",
        metavar="ollama|FILE",
        help="the word ollama (an Ollama store), or an archive to import (- for stdin; "
        "./ollama for a file named ollama)",
    )
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="import ollama only: the Ollama store (default: OLLAMA_MODELS, else "
        "~/.ollama/models, else the Linux service's /usr/share/ollama/.ollama/models)",
    )
    parser.add_argument(
        "-m",
        "--model",
        action="append",
        dest="models",
        default=[],
        metavar="NAME",
        help="import only this model, e.g. llama3.2:1b (repeat for several)",
    )
    parser.add_argument(
        "--copy",
        action="store_true",
        help="import ollama only: copy the blobs even where hard links are possible",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be imported, change nothing"
    )
    parser.add_argument(
        "-f",
        "--force",
        action="store_true",
        help="replace a model of the same name whose content differs (from an archive: "
        "and copy every blob again, which mends blobs `verify` found damaged)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.source != "ollama":
        return run_archive(args)
    from localllm.cli.output import BLOB_PROGRESS_MIN, PullProgress
    from localllm.models.service import ModelService
    from localllm.store.local import Store

    # Bars for the weights only: templates and parameters take no time to link or copy.
    progress = PullProgress(min_total=BLOB_PROGRESS_MIN)

    try:
        report = ModelService(Store()).import_ollama(
            args.path,
            models=args.models,
            copy=args.copy,
            dry_run=args.dry_run,
            force=args.force,
            progress=progress.update,
        )
    finally:
        progress.finish()
    print_report(report)
    return 1 if report.failed else 0


def print_report(report: ImportReport) -> None:
    from localllm.format import format_bytes
    from localllm.store.ollama_store import printable

    print(
        f"{'Would import' if report.dry_run else 'Importing'} from the Ollama store at "
        f"{printable(str(report.source))}"
    )
    width = max((len(m.name) for m in report.models), default=0)
    for m in report.models:
        size = format_bytes(m.size) if m.size and m.status not in ("failed", "skipped") else ""
        line = f"{m.status:<12} {m.name:<{width}}  {size}".rstrip()
        print(f"{line}: {m.reason}" if m.reason else line)
        for warning in m.warnings:
            print(f"    warning: {warning}")
    print(_summary(report))
    if report.linked or report.copied or report.present:
        print(_blobs(report))


def _summary(report: ImportReport) -> str:
    imported = report.count("would import" if report.dry_run else "imported")
    unchanged = report.count("unchanged")
    if not report.models:
        return "nothing to import: the Ollama store holds no models"
    if imported == 0 and unchanged and unchanged == len(report.models):
        models = "the model is" if unchanged == 1 else f"all {unchanged} models are"
        return f"nothing to import: {models} already in localllm ({report.seconds:.2f} s)"
    parts = [
        f"{n} {status}"
        for status in ("unchanged", "skipped", "failed")
        if (n := report.count(status))
    ]
    if imported:
        parts.insert(0, f"{imported} {'to import' if report.dry_run else 'imported'}")
    text = f"{', '.join(parts)} in {report.seconds:.2f} s"
    return text if imported else f"nothing {'to import' if report.dry_run else 'imported'}: {text}"


def _blobs(report: ImportReport) -> str:
    from localllm.format import format_bytes

    would = "would be " if report.dry_run else ""
    text = (
        f"blobs: {report.linked} {would}hard-linked ({format_bytes(report.linked_bytes)}, "
        f"0 bytes copied), {report.copied} {would}copied "
        f"({format_bytes(report.copied_bytes)}"
    )
    text += ", sha256 checked)" if report.copied and not report.dry_run else ")"
    if report.present:
        text += f", {report.present} already in the store"
    if report.copied and report.link_note:
        text += (
            f"; copied because {report.link_note}"
            if report.link_note != "--copy"
            else "; copied as --copy asks"
        )
    if report.dry_run and (report.linked or report.copied):
        text += "; digests are checked during the import"
    return text


def run_archive(args: argparse.Namespace) -> int:
    import sys

    from localllm.cli.output import BLOB_PROGRESS_MIN, PullProgress
    from localllm.store.archive import ArchiveError
    from localllm.store.archive_import import import_archive
    from localllm.store.local import Store
    from localllm.store.names import parse_name

    if args.path is not None or args.copy:
        what = "a second path" if args.path is not None else "--copy"
        print(f"Error: {what} is for `import ollama`, not for an archive", file=sys.stderr)
        return 2
    names = [parse_name(m) for m in args.models]
    progress = PullProgress(min_total=BLOB_PROGRESS_MIN)

    where = "standard input" if args.source == "-" else args.source
    if args.source == "-" and sys.stdin.isatty():
        print("Error: no archive on standard input (it is a terminal)", file=sys.stderr)
        return 2
    try:
        if args.source == "-":
            source = sys.stdin.buffer
        else:
            source = open(args.source, "rb")  # closed below
    except OSError as exc:
        raise ArchiveError(f"cannot read {args.source}: {exc.strerror or exc}") from None
    failed = ""
    try:
        report = import_archive(
            Store(),
            source,
            seekable=source.seekable(),  # a file (or stdin redirected from one)
            names=names,
            force=args.force,
            dry_run=args.dry_run,
            progress=progress.update,
        )
    except OSError as exc:  # a full disk, an unreadable file: what was verified is kept
        failed = f"importing {where}: {exc.strerror or exc}"
    finally:
        progress.finish()
        if source is not sys.stdin.buffer:
            source.close()
    if failed:
        print(f"Error: {failed}; run the import again to carry on", file=sys.stderr)
        return 1
    print_archive_report(report, where)
    return 0


def print_archive_report(report: ArchiveReport, where: str) -> None:
    from localllm.format import format_bytes

    print(f"{'Would import' if report.dry_run else 'Importing'} from the archive {where}")
    width = max((len(m.name) for m in report.models), default=0)
    for m in report.models:
        print(f"{m.status:<13} {m.name:<{width}}  {format_bytes(m.size)}")
    changed = [m for m in report.models if m.status != "unchanged"]
    verb = "to import" if report.dry_run else "imported"
    text = f"{len(changed)} {verb}"
    if len(changed) < len(report.models):
        text += f", {len(report.models) - len(changed)} unchanged"
    print(f"{text} in {report.seconds:.2f} s")
    if report.dry_run or not (report.copied or report.present):
        return
    line = (
        f"blobs: {report.copied} copied ({format_bytes(report.copied_bytes)}, sha256 checked), "
        f"{report.present} already in the store"
    )
    if report.resumed:
        line += (
            f"; {report.resumed} continued from an interrupted import "
            f"({format_bytes(report.resumed_bytes)} not copied again)"
        )
    print(line)
