"""The ``localllm`` command: builds the argument parser from one module per command.

Each command's module (``COMMANDS``, ``MODULES``) exposes ``register(subparsers)``,
which adds its sub-command and sets ``func`` (``(args) -> int``) as its handler.  Command
modules import heavy dependencies (httpx, textual, uvicorn) inside their
handlers, so ``localllm list`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from localllm import __version__
from localllm.cli.termsafe import clean
from localllm.errors import LocalLLMError, exit_code

# Command names, in the order `--help` lists them: each is a module under localllm.cli,
# but for those MODULES names (``import`` is a Python keyword).
COMMANDS = [
    "serve",
    "create",
    "run",
    "rerank",
    "stop",
    "pull",
    "import",
    "export",
    "list",
    "ps",
    "show",
    "rm",
    "cp",
    "doctor",
    "backends",
    "worker",
    "chat",
    "bench",
    "service",
    "prune",
    "verify",
    "catalog",
    "launch",
    "search",
]
MODULES = {"import": "importer"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localllm",
        description="Run large language models locally (Ollama-compatible).",
    )
    parser.add_argument("-v", "--version", action="version", version=f"localllm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"localllm.cli.{MODULES.get(name, name)}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except LocalLLMError as exc:
        # A message may quote the Hub, a GGUF or another daemon: text only.
        print(f"Error: {clean(str(exc))}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
