"""``localllm pull MODEL``: download a model through the daemon, one progress bar per layer.

Before downloading, the daemon reads the model's GGUF header over range
requests and plans the load on its machine: a model that cannot fit at all is
refused unless ``--force``.  ``--dry-run`` stops there and prints the files,
the placement, the memory by device and the largest context that fits
(``render_plan``, shared with ``show --remote``).

A library name that no source has (the daemon's 404 "not in the catalogue") is
searched for on Hugging Face and offered, and pulled only when confirmed: asked on a
terminal, or ``--yes`` (``cli/pullsearch.py``).  ``--as NAME`` gives the pulled model
a short name: the pull, then a copy through ``/api/copy``, as ``localllm cp`` makes.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from localllm.cli.termsafe import clean

if TYPE_CHECKING:
    from localllm.api.client import Client
    from localllm.api.wire import ShowResponse


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "pull",
        help="Pull a model from Hugging Face or Ollama's registry",
        description="Pull a model: a catalogue name (localllm catalog), an hf.co name, or a "
        "name from Ollama's registry (qwen3.5, user/model; ollama://NAME asks it first). "
        "A name no source has is searched for on Hugging Face: the most downloaded GGUF "
        "repo of a known publisher (the model's own organisation, ggml-org, unsloth, "
        "bartowski, lmstudio-community) is shown and pulled once you confirm it (--yes "
        "for scripts; without a terminal the command to run is printed instead).",
    )
    parser.add_argument(
        "model",
        help="model name: a library name from 'localllm catalog' (llama3.2, qwen3:8b), "
        "hf.co/user/repo[:Q4_K_M], or a name in Ollama's registry (user/model, ollama://NAME)",
    )
    add_pull_flags(parser)
    parser.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="also name the pulled model NAME (a short name for an hf.co repo)",
    )
    parser.add_argument(
        "--projector",
        metavar="FILE",
        help="vision projector to pull: a file name (mmproj-F32.gguf) or precision (F32), "
        "or 'none'; default: the model's precision, else F16",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="download nothing: read the model's header and show how it would "
        "load here (layers on GPU, memory, largest context)",
    )
    parser.add_argument(
        "--force", action="store_true", help="pull even a model that cannot fit on this machine"
    )
    parser.add_argument(
        "--max-rate",
        metavar="RATE",
        type=_rate,
        help="cap this pull's download rate, bytes/s: 5M (5 MiB/s), 500K; "
        "LOCALLLM_MAX_DOWNLOAD_RATE caps all the daemon's pulls together",
    )
    parser.set_defaults(func=run_named)


def add_pull_flags(parser: argparse.ArgumentParser) -> None:
    """The options of a pull that ``run`` takes too, since it pulls a missing model."""
    parser.add_argument("--insecure", action="store_true", help="accepted for Ollama compatibility")
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="a name no source has: pull what the Hugging Face search offers without asking",
    )


def _rate(text: str) -> int:
    from localllm.config_values import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client

    with Client(autostart=True) as client:
        if args.dry_run:
            print(render_plan(dry_run(client, args.model, args.projector)))
            return 0
        pull_with_progress(
            client, args.model, projector=args.projector, force=args.force, max_rate=args.max_rate
        )
    return 0


def run_named(args: argparse.Namespace) -> int:
    """``run``, then what a name no source has, and ``--as``, need (``cli/pullsearch.py``)."""
    import sys

    from localllm.api.client import Client
    from localllm.cli.pullsearch import confirm
    from localllm.errors import InvalidRequest, ModelNotFound
    from localllm.store.names import parse_name

    if args.as_name is not None:
        if args.dry_run:
            raise InvalidRequest("--as names a pulled model, and a dry run pulls nothing")
        if parse_name(args.as_name).is_hf:
            raise InvalidRequest("--as takes a short name (such as qwen-small), not an hf.co name")
    searched = False
    try:
        code = run(args)
    except ModelNotFound as exc:
        if args.dry_run:
            raise
        with Client(autostart=True) as client:
            args.model = confirm(
                client, args.model, exc, yes=args.yes, command="pull", as_name=args.as_name
            )
        searched = True
        code = run(args)
    if code or args.dry_run:
        return code
    pulled = clean(parse_name(args.model).display)
    if args.as_name is not None:
        with Client(autostart=True) as client:
            client.copy(args.model, args.as_name)
        print(f"{pulled} is also {parse_name(args.as_name).display}", file=sys.stderr)
    elif searched:
        print(
            f"stored as {pulled}; a short name: localllm cp {pulled} NAME, or pull with --as NAME",
            file=sys.stderr,
        )
    return code


def pull_with_progress(
    client: Client,
    model: str,
    projector: str | None = None,
    *,
    force: bool = False,
    max_rate: int | None = None,
) -> None:
    """Pull ``model`` through ``client``, drawing the bars on stderr (also ``run``'s auto-pull).

    Without ``force`` the daemon refuses a model too big for its machine before
    downloading it; ``max_rate`` caps the pull's download rate (bytes/s)."""
    from localllm.cli.output import PullProgress

    progress = PullProgress()
    try:
        for event in client.pull(model, projector, force=force, max_rate=max_rate):
            progress.update(event)
    finally:
        progress.finish()


def ensure_model(client: Client, model: str) -> ShowResponse:
    """``show`` of ``model``, pulled first (with the progress above) when missing: how
    ``run``, the REPL's ``/load`` and ``launch`` start."""
    from localllm.errors import ModelNotFound

    try:
        return client.show(model)
    except ModelNotFound:
        pass
    pull_with_progress(client, model)
    return client.show(model)


def dry_run(client: Client, model: str, projector: str | None = None) -> Mapping[str, Any]:
    """The daemon's dry run of pulling ``model``: its last event (files, model, fit:
    ``wire.DryRun``, unless the stream ended early)."""
    result: Mapping[str, Any] = {}
    for event in client.pull(model, projector, dry_run=True):
        result = event
    return result


def render_plan(result: Mapping[str, Any]) -> str:
    """A dry run for people: what would be downloaded, the model, and the fit here."""
    from localllm.format import format_bytes

    fit = result.get("fit") or {}
    details = result.get("details") or {}
    files = [f for f in result.get("files") or [] if isinstance(f, dict)]
    rows = [("source", str(result.get("source") or ""))]
    rows += [("file", _file(f)) for f in files]
    proj = result.get("projector")
    if isinstance(proj, dict):
        rows.append(("projector", _file(proj)))
    rows.append(("download", format_bytes(int(result.get("size") or 0))))
    read = int(result.get("header_bytes") or 0)
    how = f"{format_bytes(read)} of headers read" if read else "headers read before"
    out = [f"{clean(str(result.get('model', '')))} (dry run: nothing downloaded, {how})", ""]
    out += section("Files", rows)
    out += section(
        "Model",
        [
            ("architecture", str(details.get("family") or "")),
            ("parameters", str(details.get("parameter_size") or "")),
            ("quantization", str(details.get("quantization_level") or "")),
            ("context length", str(result.get("context_length") or "")),
        ],
    )
    out += section("Capabilities", [(c, "") for c in result.get("capabilities") or []])
    out += section("Fit on this machine", fit_rows(fit))
    return "\n".join(out).rstrip("\n")


def _file(f: Mapping[str, Any]) -> str:
    from localllm.format import format_bytes

    return f"{f.get('file')}  {format_bytes(int(f.get('size') or 0))}"


def fit_rows(fit: Mapping[str, Any]) -> list[tuple[str, str]]:
    from localllm.format import format_bytes

    memory = fit.get("memory") or {}
    rows = [("placement", str(fit.get("summary") or "unknown"))]
    if memory:
        rows.append(
            ("memory", ", ".join(f"{dev} {format_bytes(int(n))}" for dev, n in memory.items()))
        )
    if fit.get("context"):
        rows.append(("context", f"{fit['context']} tokens"))
    if fit.get("max_context"):
        where = {
            "gpu": " with every layer on GPU",
            "partial": f" with {fit.get('layers_on_gpu')} layers on GPU",
        }
        rows.append(
            (
                "largest context",
                f"{fit['max_context']} tokens{where.get(str(fit.get('status')), '')}",
            )
        )
    rows.append(("planner", str(fit.get("reason") or "")))
    return rows


def section(title: str, rows: list[tuple[str, str]]) -> list[str]:
    if any(v for _, v in rows):  # rows with values: the empty ones say nothing
        rows = [(k, v) for k, v in rows if v]
    if not rows:
        return []
    # Values come from the Hub (file names) and the GGUF header: text only.
    rows = [(k, clean(v)) for k, v in rows]
    width = max(len(k) for k, _ in rows) + 4
    return [f"  {title}", *(f"    {k.ljust(width)}{v}".rstrip() for k, v in rows), ""]
