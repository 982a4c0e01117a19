"""``localllm rerank MODEL QUERY [DOCUMENT...]``: rank documents by relevance to a query.

Ollama has no rerank command; this one reads as ``localllm run`` does for a
prompt: the query is an argument, the documents are the other arguments or, when
there are none, the lines of standard input (so ``grep -h ... | localllm rerank
bge-reranker "question"`` ranks a search's hits).  It prints the documents best
first with their scores (``--top N`` keeps the first N), or the daemon's
``/api/rerank`` answer as it is with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("rerank", help="Rank documents by relevance to a query")
    parser.add_argument("model")
    parser.add_argument("query")
    parser.add_argument(
        "documents",
        nargs="*",
        metavar="DOCUMENT",
        help="documents to rank (default: the lines of standard input)",
    )
    parser.add_argument(
        "--top", type=int, default=None, metavar="N", help="show only the N most relevant documents"
    )
    parser.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
    parser.add_argument(
        "--keepalive",
        default=None,
        metavar="DURATION",
        help="how long the model stays loaded (e.g. 5m)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from localllm.api.client import Client
    from localllm.cli.output import table
    from localllm.errors import InvalidRequest

    docs: list[str] = list(args.documents)
    if not docs and not sys.stdin.isatty():
        docs = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not docs:
        raise InvalidRequest(
            "no documents to rank: give them after the query, or one a line on standard input"
        )
    body: dict[str, Any] = {"model": args.model, "query": args.query, "documents": docs}
    if args.top is not None:
        if args.top < 1:
            raise InvalidRequest("--top takes a positive number of documents")
        body["top_n"] = args.top
    if args.keepalive is not None:
        body["keep_alive"] = args.keepalive
    with Client(autostart=True) as client:
        got = client.rerank(body)
    if args.json:
        print(json.dumps(got, ensure_ascii=False, indent=2))
        return 0
    rows = [
        (f"{r['relevance_score']:.4f}", str(r["index"]), _line(docs[r["index"]]))
        for r in got["results"]
    ]
    print(table(("SCORE", "#", "DOCUMENT"), rows, gap=3))
    return 0


def _line(text: str, width: int = 100) -> str:
    """A document on one line, cut to ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
