"""``localllm search QUERY``: GGUF models on Hugging Face, and whether each quant fits here.

The daemon searches (``GET /api/search``: the Hub's model search merged with the
library catalogue, one header read per repo) and plans every quant on its own
devices; this prints one block per repo, most downloaded first, catalogue
matches before them:

    hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF  llama3.2:1b
      1.2M downloads · 340 likes · updated 3 months ago · context 131072 · completion, tools
      QUANT     SIZE      FIT
      Q4_K_M    808 MB    all 17 layers on GPU · 1.4 GB at 4096 tokens

``--json`` prints the daemon's answer as it is, for scripts.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from localllm.format import format_count as count

if TYPE_CHECKING:
    from localllm.api.wire import FitResult, SearchModel


def register(sub: Any) -> None:
    parser = sub.add_parser("search", help="Search Hugging Face for GGUF models that fit here")
    parser.add_argument("query", nargs="+", help="words to look for in repo names")
    parser.add_argument(
        "-n", "--limit", type=int, default=10, metavar="N", help="repos to show (1-50, default 10)"
    )
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client

    with Client(autostart=True) as client:
        models = client.search(" ".join(args.query), args.limit)
    if args.json:
        print(json.dumps({"models": models}, indent=2))
        return 0
    if not models:
        print(f"no GGUF models found for '{' '.join(args.query)}'")
        return 0
    print("\n\n".join(render(m) for m in models))
    return 0


def fit_text(fit: FitResult | None) -> str:
    from localllm.format import format_bytes

    if not fit:
        return "unknown"
    status = fit.get("status")
    summary = str(fit.get("summary") or "unknown")
    if status in ("unknown", "too_big") or not fit.get("memory"):
        return summary
    total = sum(int(v) for v in fit["memory"].values())
    return f"{summary} · {format_bytes(total)} at {fit.get('context')} tokens"


def render(m: SearchModel) -> str:
    from localllm.cli.output import table
    from localllm.cli.termsafe import clean
    from localllm.format import format_bytes, parse_timestamp, time_ago

    head = str(m.get("name", ""))
    if m.get("catalog"):
        head += "  " + ", ".join(m["catalog"])
    facts = [
        f"{count(int(m.get('downloads') or 0))} downloads",
        f"{count(int(m.get('likes') or 0))} likes",
    ]
    if m.get("updated"):
        facts.append("updated " + time_ago(parse_timestamp(str(m["updated"]))).lower())
    if m.get("context_length"):
        facts.append(f"context {m['context_length']}")
    facts.append(", ".join(m.get("capabilities") or []))
    # Names, capabilities and errors are the Hub's words: text only.
    lines = [clean(head), "  " + clean(" · ".join(f for f in facts if f))]
    quants = m.get("quants") or []
    if quants:
        rows = [
            (
                str(q.get("tag", "")),
                format_bytes(int(q.get("size") or 0)),
                fit_text(q.get("fit")),
            )
            for q in quants
        ]
        lines += ["  " + ln for ln in table(["QUANT", "SIZE", "FIT"], rows).splitlines()]
    elif m.get("error"):
        lines.append(f"  (files not listed: {clean(str(m['error']))})")
    else:
        lines.append("  (no GGUF model files listed in time)")
    return "\n".join(lines)
