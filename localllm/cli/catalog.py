"""``localllm catalog [list|update|reset]``: the library names (``llama3.2``, ``qwen3:8b``).

``list`` (the default) prints every ``name:tag`` with the Hugging Face GGUF it
pulls, marking each family's ``latest`` and the entries whose repo or quant could not
be checked against a public listing (``unverified``; ``"verified": false`` in
``--json``); ``update`` downloads a newer, signed
catalogue and ``reset`` removes it (see ``localllm.store.catalog_update``).  All
read and write this machine's files, without the daemon, which reads the same files
on each pull.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NotRequired, TypedDict


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
        description="Download catalog.toml from a Hugging Face repo (LOCALLLM_CATALOG_REPO) "
        "with its signature, catalog.toml.sig: it is used only if signed by a key this "
        "localllm ships, dated no later than tomorrow and newer than the built-in "
        "catalogue, and only for entries of known publishers. The catalogue in use is "
        "kept on any failure.",
    )
    up.add_argument("--repo", help="Hugging Face repo, user/name (default: LOCALLLM_CATALOG_REPO)")
    up.add_argument(
        "--file", default="catalog.toml", help="file in the repo (default: catalog.toml)"
    )
    up.add_argument(
        "--sha256",
        metavar="HEX",
        help="also require this sha256 of the file (the signature is checked as well)",
    )
    up.set_defaults(func=run_update)
    reset = verbs.add_parser(
        "reset",
        help="Remove the downloaded catalogue: the built-in one is used again",
        description="Remove the catalogue 'catalog update' downloaded, its signature and "
        "source.json. Your own catalog.toml in the config folder is kept.",
    )
    reset.set_defaults(func=run_reset)
    parser.set_defaults(func=run_list, query="")


# One line of ``catalog list --json`` (the functional form: ``from`` is a keyword).
CatalogRow = TypedDict(
    "CatalogRow",
    {
        "name": str,
        "source": str,
        "latest": bool,
        "from": str,  # the file the tag came from: built-in, updated or user
        "projector": NotRequired[str],
        "verified": NotRequired[bool],  # present (false) only for unverified entries
        "description": NotRequired[str],
    },
)


def rows(query: str = "") -> list[CatalogRow]:
    """One row per ``name:tag`` (``latest`` first), filtered by ``query`` (a substring)."""
    from localllm.store import catalog

    cat = catalog.load()
    out: list[CatalogRow] = []
    q = query.lower()
    for fam in sorted(cat.families.values(), key=lambda f: f.name.lower()):
        for tag, entry in fam.tags.items():
            name = f"{fam.name}:{tag}"
            if q and q not in name.lower() and q not in entry.source.display.lower():
                continue
            row: CatalogRow = {
                "name": name,
                "source": entry.source.display,
                "latest": tag == fam.latest,
                "from": entry.layer,
            }
            if entry.projector:
                row["projector"] = entry.projector
            if not entry.verified:
                row["verified"] = False
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
                "unverified" if r.get("verified") is False else "",
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
    if result.dropped:
        print(f"left out {result.dropped} entries whose repos are not from a known publisher")
    if result.in_use:
        print(f"now in use; saved as {result.path}")
    else:
        print(
            f"saved as {result.path}, but the built-in catalogue is as new or newer "
            "and stays in use"
        )
    return 0


def run_reset(args: argparse.Namespace) -> int:
    from localllm import paths
    from localllm.store import catalog_update

    removed = catalog_update.reset()
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print(f"no downloaded catalogue in {paths.catalog_data()}: nothing to remove")
    print("the built-in catalogue is in use")
    return 0
