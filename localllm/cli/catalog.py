"""``localllm catalog [list|update]``: the library names (``llama3.2``, ``qwen3:8b``).

``list`` (the default) prints every ``name:tag`` with the Hugging Face GGUF it
pulls, marking each family's ``latest``; ``update`` downloads a newer catalogue
(see ``localllm.store.catalog_update``).  Both read and write this machine's
files, without the daemon, which reads the same files on each pull.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "catalog",
        help="List the library names pull and run accept, or update them",
        description="The catalogue maps library names such as llama3.2, qwen3:8b or "
        "nomic-embed-text to GGUF files on Hugging Face. Your own entries go in "
        "catalog.toml in the config folder (see docs/quickstart.md).",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    ls = verbs.add_parser("list", help="List the catalogue's names (the default)")
    ls.add_argument(
        "query", nargs="?", default="", help="only names (or sources) containing this text"
    )
    ls.add_argument("--json", action="store_true", help="print JSON for scripts")
    ls.set_defaults(func=run_list)
    up = verbs.add_parser(
        "update",
        help="Download the newest catalogue from Hugging Face",
        description="Download catalog.toml from a Hugging Face repo (LOCALLLM_CATALOG_REPO), "
        "check its sha256 against catalog.toml.sha256 beside it (or --sha256) "
        "and validate it; the catalogue in use is kept on any failure.",
    )
    up.add_argument("--repo", help="Hugging Face repo, user/name (default: LOCALLLM_CATALOG_REPO)")
    up.add_argument(
        "--file", default="catalog.toml", help="file in the repo (default: catalog.toml)"
    )
    up.add_argument(
        "--sha256",
        metavar="HEX",
        help="expected sha256 of the file; then no .sha256 file is needed",
    )
    up.set_defaults(func=run_update)
    parser.set_defaults(func=run_list, query="")


def rows(query: str = "") -> list[dict[str, Any]]:
    """One dict per ``name:tag`` (``latest`` first), filtered by ``query`` (a substring)."""
    from localllm.store import catalog

    cat = catalog.load()
    out: list[dict[str, Any]] = []
    q = query.lower()
    for fam in sorted(cat.families.values(), key=lambda f: f.name.lower()):
        for tag, entry in fam.tags.items():
            name = f"{fam.name}:{tag}"
            if q and q not in name.lower() and q not in entry.source.display.lower():
                continue
            row: dict[str, Any] = {
                "name": name,
                "source": entry.source.display,
                "latest": tag == fam.latest,
                "from": entry.layer,
            }
            if entry.projector:
                row["projector"] = entry.projector
            if fam.description:
                row["description"] = fam.description
            out.append(row)
    return out


def run_list(args: argparse.Namespace) -> int:
    import json

    from localllm.cli.output import table
    from localllm.store import catalog, catalog_update

    found = rows(args.query)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    cat = catalog.load()
    table_rows = []
    for r in found:
        notes = [
            n
            for n in (
                "latest" if r["latest"] else "",
                f"projector {r['projector']}" if r.get("projector") else "",
                "your file" if r["from"] == "user" else "",
            )
            if n
        ]
        table_rows.append((r["name"], r["source"], ", ".join(notes)))
    print(table(["NAME", "SOURCE", "NOTES"], table_rows))
    where = "built-in"
    if cat.base == "updated":
        src = catalog_update.source() or {}
        where = f"downloaded from hf.co/{src.get('repo', '?')}"
    date = f" of {cat.updated.isoformat()}" if cat.updated else ""
    user = f"; your entries: {cat.user_file}" if cat.user_file else ""
    print(f"{len(found)} names; catalogue{date}, {where}{user}", file=sys.stderr)
    return 0


def run_update(args: argparse.Namespace) -> int:
    from localllm.store import catalog_update

    result = catalog_update.update(args.repo, args.file, args.sha256)
    date = result.updated.isoformat() if result.updated else "undated"
    print(
        f"downloaded hf.co/{result.repo}/{result.file} (sha256 {result.sha256[:12]}…): "
        f"{result.families} models, {result.tags} tags, dated {date}"
    )
    if result.in_use:
        print(f"now in use; saved as {result.path}")
    else:
        print(f"saved as {result.path}, but the built-in catalogue is newer and stays in use")
    return 0
