"""``localllm verify [NAME…] [--repair]``: re-hash the store's blobs, report and repair damage.

Runs in this process, without the daemon (``store/verify.py`` does the work): it
reads every blob of the models named, or of all models, and prints one line per
model.  ``--repair`` pulls the damaged models that were pulled again, here, from
where they came from (``HF_ENDPOINT`` and ``HF_TOKEN`` as for ``pull``).  A model
the daemon has loaded keeps the bytes it mapped until it is loaded again
(``localllm stop NAME``).  Exit status 1 while any damage is left.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "verify",
        help="Check the stored models' blobs against their sha256",
        description="Hash every blob of the models named (default: all) again and report "
        "those missing or damaged. With --repair, pull the damaged models again from where "
        "they were pulled (Hugging Face, Ollama's registry); one with no pull origin (made "
        "here) is reported as not repairable. Runs without the daemon.",
    )
    parser.add_argument("models", nargs="*", metavar="NAME", help="a model to check")
    parser.add_argument(
        "--repair", action="store_true", help="pull damaged models again from their origin"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.cli.output import BLOB_PROGRESS_MIN, PullProgress
    from localllm.format import format_bytes
    from localllm.store.local import Store
    from localllm.store.names import ModelName, parse_name
    from localllm.store.pull import pull_model
    from localllm.store.verify import repair, verify

    store = Store()
    progress = PullProgress(min_total=BLOB_PROGRESS_MIN)

    try:
        report = verify(store, [parse_name(m) for m in args.models], progress.update)
    finally:
        progress.finish()
    width = max((len(m.name) for m in report.models), default=0)
    for m in report.models:
        print(f"{'ok' if m.ok else 'damaged':<8} {m.name:<{width}}  {format_bytes(m.size)}")
        for digest, what in m.damaged.items():
            print(f"    blob {digest}: {what}")
    noun = "model" if len(report.models) == 1 else "models"
    summary = (
        f"checked {len(report.models)} {noun}, {report.blobs} blobs "
        f"({format_bytes(report.bytes)}) in {report.seconds:.2f} s: "
    )
    if not report.damaged:
        print(summary + ("all whole" if report.models else "no models"))
        return 0
    print(summary + f"{len(report.damaged)} damaged")
    if not args.repair:
        print("`localllm verify --repair` pulls the damaged models again where it can")
        return 1

    pulls = PullProgress()

    def pull(
        name: ModelName, source: ModelName | None, projector: str | None, via: str | None
    ) -> None:
        if source is None:  # another origin: the pull of the name follows it
            from localllm.models.service import ModelService

            pulls.update({"status": f"pulling {name.display} again"})
            ModelService(store).pull(name.display, pulls.update)
            return
        pulls.update({"status": f"pulling {name.display} again from {source.display}"})
        same = source == name
        pull_model(
            store, name, pulls.update, source=None if same else source, projector=projector, via=via
        )

    try:
        repair(store, report, pull)
    finally:
        pulls.finish()
    for m in report.damaged:
        print(f"{m.name}: {m.repair}")
    left = report.unrepaired
    if left:
        print(
            f"{len(left)} of {len(report.damaged)} damaged models could not be repaired; "
            "`localllm import --force FILE` mends them from an archive made where they are whole"
        )
        return 1
    print("every damaged model was repaired")
    return 0
