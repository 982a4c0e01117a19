"""``localllm chat [MODEL]`` (alias ``tui``): the Textual chat app.

Textual is imported inside the handler, so other commands never pay for it.
``--host`` points the app at any Ollama-compatible server; ``--mcp FILE`` (and
``--yes-tools``) offers MCP servers' tools, as ``run`` does (``tui/mcptools.py``).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from localllm.cli.mcptools import add_mcp_flags

    parser = sub.add_parser("chat", aliases=["tui"], help="Chat in a terminal UI")
    parser.add_argument("model", nargs="?", help="model to start with (default: the last used)")
    parser.add_argument(
        "--host",
        metavar="URL",
        help="daemon address, e.g. http://127.0.0.1:11434 (default: LOCALLLM_HOST)",
    )
    parser.add_argument("--theme", help="Textual theme, e.g. textual-light, textual-dark")
    add_mcp_flags(parser)
    parser.set_defaults(func=run)


def host_url(host: str | None) -> str | None:
    """``host:port``, ``:port`` or a full URL -> a base URL (None keeps the default)."""
    if not host:
        return None
    if "://" in host:
        return host.rstrip("/")
    if host.startswith(":"):
        host = "127.0.0.1" + host
    return f"http://{host}"


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from localllm.mcp.servers import read_servers
    from localllm.tui.app import LocalLLMApp

    servers = read_servers(Path(args.mcp)) if args.mcp else []  # a bad file fails here
    LocalLLMApp(
        host_url(args.host),
        model=args.model,
        theme=args.theme,
        mcp_servers=servers,
        trust_tools=args.yes_tools,
    ).run()
    return 0
