"""``localllm run MODEL [PROMPT...]``: pull when missing, then answer once or chat interactively.

One-shot when a prompt is given or stdin is not a terminal (stdin's text and
the prompt words are joined with a space, stdin first, as Ollama does);
otherwise the interactive session of ``localllm.cli.repl``.  Both talk to
the same chat call, so a one-shot answer and a first REPL answer to the same text
are the same.

A name that no source has is searched for on Hugging Face, as ``pull`` does
(``cli/pullsearch.py``): the repo offered is pulled and run once confirmed, on a
terminal or with ``--yes``.

Word wrap: on a terminal, answers are wrapped at spaces to the terminal's
width (``--nowordwrap`` or ``/set nowordwrap`` turns it off); output to a
pipe or file is never wrapped.

The flags are Ollama's (its ``cmd/cmd.go``): ``--format`` json or a JSON
schema, ``--keepalive`` for the load and every request, ``--think`` (bare, or
``=false``/a level; without it a model that can think does, as in Ollama),
``--hidethinking`` (it still thinks; the thinking is not shown),
``--truncate``/``--dimensions`` for embedding models.  The REPL's ``/set``
commands change the same session values afterwards.  Ours: ``--mcp FILE`` offers
the tools of the MCP servers in FILE, each call confirmed unless ``--yes-tools``
(``cli/mcptools.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localllm.api.client import Client
    from localllm.cli.mcptools import ToolLoop
    from localllm.cli.session import Session


class _PromptAfterFlags(argparse.ArgumentParser):
    """Accepts prompt words after flags too (``run m --verbose why is the sky blue``).

    argparse fills a ``*`` positional with the words before the first flag only;
    the words after it come back as extras, and belong to the prompt.  A bare
    ``--think`` takes no value (as in Ollama, a level needs ``--think=high``), so
    ``run m --think why`` keeps "why" in the prompt; so does ``--truncate``, a
    boolean flag (``--truncate=false``).
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None:
            args = [f"{a}=true" if a in ("--think", "--truncate") else a for a in args]
        ns, extras = super().parse_known_args(args, namespace)
        words = [w for w in extras if not w.startswith("-") or w == "-"]
        ns.prompt = [*(getattr(ns, "prompt", None) or []), *words]
        return ns, [w for w in extras if w not in words]


def register(sub: Any) -> None:
    from localllm.cli.mcptools import add_mcp_flags
    from localllm.cli.pull import add_pull_flags

    parser = sub.add_parser("run", help="Run a model (one answer, or an interactive chat)")
    parser.__class__ = _PromptAfterFlags
    parser.add_argument(
        "model",
        help="model name (llama3.2, hf.co/user/repo:Q4_K_M, or one "
        "made with create); pulled first when missing",
    )
    parser.add_argument("prompt", nargs="*", help="prompt (omit for an interactive session)")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print timings and token rates after each answer (stderr)",
    )
    parser.add_argument(
        "--format",
        metavar="FORMAT",
        help="answer format: json, or a JSON schema the answer must follow",
    )
    parser.add_argument(
        "--keepalive",
        metavar="DURATION",
        help="how long the model stays loaded, e.g. 5m, 1h, 0, -1 (forever)",
    )
    parser.add_argument(
        "--think",
        nargs="?",
        const="true",
        metavar="LEVEL",
        help="think before answering; --think=false, or a level: --think=low|medium|high",
    )
    parser.add_argument(
        "--hidethinking", action="store_true", help="don't show the model's thinking"
    )
    parser.add_argument(
        "--truncate",
        nargs="?",
        const="true",
        metavar="BOOL",
        help="embedding models: cut input longer than the context (the "
        "daemon's default); --truncate=false to get an error instead",
    )
    parser.add_argument(
        "--dimensions",
        type=int,
        default=0,
        metavar="N",
        help="embedding models: return the first N dimensions (normalized)",
    )
    parser.add_argument(
        "--nowordwrap", action="store_true", help="don't wrap long lines at word boundaries"
    )
    add_mcp_flags(parser)
    add_pull_flags(parser)  # a missing model is pulled first
    parser.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="interactive session even when stdin is not a terminal",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.api.client import Client
    from localllm.api.hint import show as gpu_hint
    from localllm.cli.pull import ensure_model
    from localllm.cli.pullsearch import confirm
    from localllm.cli.session import preload, session_from_args
    from localllm.errors import InvalidRequest, ModelNotFound

    session = session_from_args(args)
    prompt = " ".join(args.prompt)
    interactive = args.interactive or (not prompt and sys.stdin.isatty())
    if not interactive and not sys.stdin.isatty():
        piped = sys.stdin.read()
        prompt = " ".join(p for p in (piped, prompt) if p)
    with Client(autostart=True) as client:
        try:
            info = ensure_model(client, args.model)
        except ModelNotFound as exc:
            session.model = confirm(client, args.model, exc, yes=args.yes, command="run")
            info = ensure_model(client, session.model)
        capabilities = info.get("capabilities") or []
        if "embedding" in capabilities:
            return embed(client, session, prompt, interactive)
        if "rerank" in capabilities:
            raise InvalidRequest(
                f'"{args.model}" is a reranker, it does not chat: '
                f"localllm rerank {args.model} QUERY DOCUMENT..."
            )
        session.infer_think(capabilities)
        with contextlib.ExitStack() as stack:
            tools = _tools(stack, args, piped=not interactive and not sys.stdin.isatty())
            if interactive:
                from localllm.cli.repl import Repl

                preload(client, session)
                gpu_hint(client)  # the model is loaded: the daemon knows its devices
                return Repl(client, session, tools=tools).run()
            code = one_shot(client, session, prompt, tools)
        gpu_hint(client)
        return code


def _tools(stack: contextlib.ExitStack, args: argparse.Namespace, piped: bool) -> ToolLoop | None:
    """The MCP servers of ``--mcp``, started for the run (None without the flag)."""
    if not args.mcp:
        return None
    from pathlib import Path

    from localllm.cli.mcptools import ToolLoop, ask_terminal
    from localllm.mcp.blocking import open_hub
    from localllm.mcp.hub import CALL_TIMEOUT
    from localllm.mcp.servers import read_servers

    hub = stack.enter_context(open_hub(read_servers(Path(args.mcp)), call_timeout=CALL_TIMEOUT))
    loop = ToolLoop(hub, trusted=args.yes_tools)
    if piped:  # stdin was the prompt: confirmations come from the terminal
        loop.ask = ask_terminal
    return loop


def one_shot(client: Client, session: Session, prompt: str, tools: ToolLoop | None = None) -> int:
    from localllm.cli.attach import attach
    from localllm.cli.chatstream import StreamPrinter, print_stats
    from localllm.cli.mcptools import answer

    def printer() -> StreamPrinter:
        return StreamPrinter(hide_thinking=session.hide_thinking, wordwrap=session.wordwrap)

    # Image files named in the prompt go along (as Ollama's CLI does).
    turn = answer(client, session, [attach(prompt)], printer, tools)
    if turn.interrupted:
        return 130
    if session.verbose:
        print_stats(turn)
    return 0


def embed(client: Client, session: Session, text: str, interactive: bool) -> int:
    """An embedding model has no answer to stream: print the input's vector as JSON."""
    import json

    from localllm.errors import InvalidRequest

    if interactive or not text:
        raise InvalidRequest(
            f"embedding models need input text: localllm run {session.model} "
            "'your text here' (or pipe it in)"
        )
    body: dict[str, Any] = {"model": session.model, "input": text}
    if session.keep_alive is not None:
        body["keep_alive"] = session.keep_alive
    if session.truncate is not None:
        body["truncate"] = session.truncate
    if session.dimensions:
        body["dimensions"] = session.dimensions
    result = client.embed(body)
    print(json.dumps(result["embeddings"][0]))
    return 0
