"""``localllm chat [MODEL]`` (alias ``tui``): the Textual chat app.

Textual is imported inside the handler, so other commands never pay for it.
``--host`` points the app at any Ollama-compatible server.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("chat", aliases=["tui"], help="Chat in a terminal UI")
    parser.add_argument("model", nargs="?", help="model to start with (default: the last used)")
    parser.add_argument(
        "--host",
        metavar="URL",
        help="daemon address, e.g. http://127.0.0.1:11434 (default: LOCALLLM_HOST)",
    )
    parser.add_argument("--theme", help="Textual theme, e.g. textual-light, textual-dark")
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
    from localllm.tui.app import LocalLLMApp

    LocalLLMApp(host_url(args.host), model=args.model, theme=args.theme).run()
    return 0
