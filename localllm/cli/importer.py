"""``localllm import ollama [PATH]``: reuse the models of an Ollama store, nothing downloaded.

The module is ``importer`` because ``import`` is a Python keyword; the command is
``import``.  It runs in this process, without the daemon: it reads Ollama's folder
and adds blobs and manifests to localllm's store, which the daemon lists at once
(the local store: ``LOCALLLM_HOST`` pointing at another machine changes nothing
here).  Progress bars go to stderr; one line per model and a summary to stdout.
Exit status 1 when any model failed (a broken entry, or a name already taken).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localllm.store.ollama_import import ImportReport

PROGRESS_MIN = 1 << 20  # bytes: smaller blobs get no progress bar


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "import",
        help="Import the models of an Ollama store",
        description="Bring in every model of an Ollama store (weights, projectors, adapters, "
        "templates, system prompts, parameters, messages, licenses) under its "
        "Ollama name. Blobs are hard-linked when both stores are on one "
        "filesystem (no bytes copied), else copied; every blob is checked "
        "against its sha256. The Ollama store is never modified.",
    )
    parser.add_argument("source", choices=["ollama"], help="where the models come from")
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="the Ollama store (default: OLLAMA_MODELS, else ~/.ollama/models, "
        "else the Linux service's /usr/share/ollama/.ollama/models)",
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
        "--copy", action="store_true", help="copy the blobs even where hard links are possible"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be imported, change nothing"
    )
    parser.add_argument(
        "-f",
        "--force",
        action="store_true",
        help="replace a model of the same name whose content differs",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.cli.output import PullProgress
    from localllm.services import ModelService
    from localllm.store.local import Store

    progress = PullProgress()

    def update(event: dict[str, Any]) -> None:
        # Bars for the weights only: templates and parameters take no time to link or copy.
        if event.get("total", 0) >= PROGRESS_MIN:
            progress.update(event)

    try:
        report = ModelService(Store()).import_ollama(
            args.path,
            models=args.models,
            copy=args.copy,
            dry_run=args.dry_run,
            force=args.force,
            progress=update,
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
