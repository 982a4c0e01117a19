"""``localllm show MODEL``: architecture, size, context, quantization, template, license.

With one of ``--modelfile``, ``--template``, ``--parameters``, ``--license``
or ``--system`` only that text is printed, ready to be piped.  ``--remote``
shows a model that is not pulled yet, from its header on the Hub, with how it
would load here (the dry run of ``pull``; cli/pull.py renders it).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from localllm.cli.termsafe import clean

if TYPE_CHECKING:
    from localllm.api.wire import PsEntry

_ONLY = ("modelfile", "template", "parameters", "license", "system")
_PREVIEW_LINES = 3


def register(sub: Any) -> None:
    parser = sub.add_parser("show", help="Show information for a model")
    parser.add_argument("model")
    only = parser.add_mutually_exclusive_group()
    for field in _ONLY:
        only.add_argument(f"--{field}", action="store_true", help=f"show the model's {field}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show all metadata")
    parser.add_argument(
        "--remote",
        action="store_true",
        help="a model not pulled yet: read its header on Hugging Face and show "
        "it, and how it would load here, without downloading it",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client

    if args.remote:
        from localllm.cli.pull import dry_run, render_plan

        with Client(autostart=True) as client:
            print(render_plan(dry_run(client, args.model)))
        return 0
    with Client(autostart=True) as client:
        info = client.show(args.model, verbose=args.verbose)
        loaded: list[tuple[str, str]] = []
        if not any(getattr(args, f) for f in _ONLY):
            loaded = _loaded(client.ps(), str(info.get("model") or args.model))
    for field in _ONLY:
        if getattr(args, field):
            text = clean(str(info.get(field) or ""))  # from the GGUF or a Modelfile layer
            print(text if text.endswith("\n") or not text else text + "\n", end="")
            return 0
    print(render(info, verbose=args.verbose, loaded=loaded))
    return 0


def _section(title: str, rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return []
    # Keys and values are the model's (GGUF metadata, Modelfile layers): text only.
    rows = [(clean(k), clean(v)) for k, v in rows]
    width = max(len(k) for k, _ in rows) + 4
    return [f"  {title}", *(f"    {k.ljust(width)}{v}".rstrip() for k, v in rows), ""]


def _preview(text: str) -> list[tuple[str, str]]:
    # Cleaned before the split, so that a sequence spanning lines goes as a whole.
    lines = [ln for ln in clean(text).strip().splitlines() if ln.strip()]
    rows = [(ln.strip(), "") for ln in lines[:_PREVIEW_LINES]]
    if len(lines) > _PREVIEW_LINES:
        rows.append(("...", ""))
    return rows


def render(
    info: Mapping[str, Any], *, verbose: bool = False, loaded: Sequence[tuple[str, str]] = ()
) -> str:
    """``/api/show``'s answer for people; ``loaded``: where it runs now (``_loaded``)."""
    details = info.get("details") or {}
    model_info = info.get("model_info") or {}
    arch = str(model_info.get("general.architecture") or details.get("family") or "")
    model_rows = [
        ("architecture", arch),
        ("parameters", str(details.get("parameter_size") or "")),
        ("context length", str(model_info.get(f"{arch}.context_length", ""))),
        ("embedding length", str(model_info.get(f"{arch}.embedding_length", ""))),
        ("quantization", str(details.get("quantization_level") or "")),
    ]
    out = _section("Model", [(k, v) for k, v in model_rows if v])
    out += _section("Source", _origin_rows(info.get("origin")))
    draft = (info.get("draft") or {}).get("details") or {}
    draft_rows = [
        ("architecture", str(draft.get("family") or "")),
        ("parameters", str(draft.get("parameter_size") or "")),
        ("quantization", str(draft.get("quantization_level") or "")),
    ]
    out += _section("Draft model", [(k, v) for k, v in draft_rows if v])
    out += _section("Loaded", list(loaded))
    out += _section("Capabilities", [(c, "") for c in info.get("capabilities") or []])
    params = [ln.split(None, 1) for ln in str(info.get("parameters") or "").splitlines()]
    out += _section("Parameters", [(p[0], p[1] if len(p) > 1 else "") for p in params if p])
    out += _section("System", _preview(str(info.get("system") or "")))
    template = str(info.get("template") or "")
    caps = info.get("capabilities") or []
    if not template.strip() and "embedding" not in caps:
        # A base model: its prompt is sent as written (Ollama's default template).
        out += _section("Template", [("none: no chat template, the prompt is passed as is", "")])
    else:
        out += _section("Template", _preview(template))
    out += _section("License", _preview(str(info.get("license") or "")))
    if verbose and model_info:
        rows = [(k, _short(v)) for k, v in sorted(model_info.items())]
        out += _section("Metadata", rows)
    return "\n".join(out).rstrip("\n")


def _origin_rows(origin: Any) -> list[tuple[str, str]]:
    """Where a pulled model came from (``/api/show``'s ``origin``): the hf.co name that
    pulls it again, the catalogue entry that led there, its file(s) and digest."""
    if not isinstance(origin, dict):
        return []
    rows = [("from", str(origin.get("source") or ""))]
    if origin.get("catalog"):
        rows.append(("catalogue", str(origin["catalog"])))
    files = [f for f in origin.get("files") or [] if isinstance(f, dict)]
    if len(files) > 1:
        rows.append(("files", f"{files[0].get('file', '')} (+{len(files) - 1} parts)"))
    elif files:
        rows.append(("file", str(files[0].get("file", ""))))
    rows.append(("digest", str(origin.get("digest") or "")))
    projector = origin.get("projector")
    if isinstance(projector, dict):
        rows.append(("projector", str(projector.get("file", ""))))
    return [(k, v) for k, v in rows if v]


def _loaded(running: Sequence[PsEntry], model: str) -> list[tuple[str, str]]:
    """Where the model runs now, when it is loaded: the same words as ``ps``."""
    from localllm.format import processor

    want = {model, model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"}
    for m in running:
        if m.get("name") in want or m.get("model") in want:
            size, vram = int(m.get("size") or 0), int(m.get("size_vram") or 0)
            return [
                ("processor", processor(size, vram, m.get("devices"))),
                ("context", str(m.get("context_length") or "")),
            ]
    return []


def _short(value: Any, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
