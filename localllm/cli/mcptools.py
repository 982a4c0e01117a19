"""``run --mcp FILE``: MCP tools offered to the model, each call confirmed, results sent back.

The CLI is the MCP client here (the daemon only chats, DESIGN §1): it starts the
servers named in the file (``localllm.mcp``), offers their tools in each chat
request, and when the model calls one asks ``Run tool NAME (server) with ARGS?
[y/N]`` unless ``--yes-tools`` said the servers are trusted.  A refused call
still answers the model ("the user refused"), so it can say so instead of
waiting.  The loop ends when the model answers with text, or after
``MAX_ROUNDS`` rounds of calls.  The REPL and the one-shot answer share it, and
``run`` and ``chat`` (the TUI) share its flags (:func:`add_mcp_flags`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from localllm.cli.chatstream import StreamPrinter, Turn, stream_chat

if TYPE_CHECKING:
    import argparse

    from localllm.api.bodies import ChatMessage
    from localllm.api.client import Client
    from localllm.api.wire import ToolCall
    from localllm.cli.session import Session
    from localllm.mcp.blocking import BlockingHub

MAX_ROUNDS = 8  # rounds of tool calls one question may take
REFUSED = "The user refused to run this tool call."
Ask = Callable[[str], "str | None"]  # shows a question, returns the answer (None: no one to ask)


def add_mcp_flags(parser: argparse.ArgumentParser) -> None:
    """``--mcp FILE`` and ``--yes-tools``, as ``run`` and ``chat`` both take them."""
    parser.add_argument(
        "--mcp",
        metavar="FILE",
        help='offer the tools of the MCP servers in FILE ({"mcpServers": {...}}); '
        "each call is confirmed first",
    )
    parser.add_argument(
        "--yes-tools",
        action="store_true",
        help="call MCP tools without asking (the servers are trusted)",
    )


def ask_terminal(question: str) -> str | None:
    """Ask on the terminal even when stdin was a pipe (one-shot ``run`` read the prompt
    from it); no terminal at all is no answer, which refuses."""
    if sys.stdin.isatty():
        return _ask_stdin(question)
    try:
        with open("/dev/tty", "r+", encoding="utf-8") as tty:
            tty.write(question)
            tty.flush()
            return tty.readline().strip()
    except OSError:
        return None


def _ask_stdin(question: str) -> str | None:
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    return line.strip() if line else None


@dataclass
class ToolLoop:
    """The MCP tools of one ``run``: offered, confirmed, called."""

    hub: BlockingHub
    trusted: bool = False  # --yes-tools: call without asking
    ask: Ask = field(default=_ask_stdin)
    out: TextIO = field(default_factory=lambda: sys.stderr)

    def _approved(self, name: str, server: str, arguments: str) -> bool:
        if self.trusted:
            return True
        answer = self.ask(f"Run tool {name} ({server}) with {arguments}? [y/N] ")
        return (answer or "").lower() in ("y", "yes")

    def run(self, call: ToolCall) -> ChatMessage:
        """One call, confirmed and made: the tool message that answers it."""
        fn = call["function"]
        name, args = fn["name"], fn.get("arguments") or {}
        shown = json.dumps(args, ensure_ascii=False)
        tool = self.hub.tools.get(name)
        if tool is None:
            text = f"error: there is no tool named {name!r}"
        elif not self._approved(name, tool.server, shown):
            text = REFUSED
            print(f"[tool {name}: refused]", file=self.out)
        else:
            outcome = self.hub.call(name, args)
            text = outcome.text
            mark = "" if outcome.error is None else " (failed)"
            print(f"[tool {name}{mark}] {_short(text)}", file=self.out)
        answer: ChatMessage = {"role": "tool", "content": text, "tool_name": name}
        if call.get("id"):
            answer["tool_call_id"] = call["id"]
        return answer


def _short(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def answer(
    client: Client,
    session: Session,
    messages: list[ChatMessage],
    printer: Callable[[], StreamPrinter],
    tools: ToolLoop | None,
) -> Turn:
    """Chat on ``messages`` until the model answers without calling a tool.

    Each round of calls is appended to ``messages`` (the assistant turn that made
    them, then one tool message per call), so the REPL's history keeps them.
    """
    for round_ in range(MAX_ROUNDS + 1):
        body = session.payload(messages)
        if tools is not None:
            body["tools"] = tools.hub.native_tools()
        turn = stream_chat(client, body, printer())
        if tools is None or turn.interrupted or not turn.tool_calls:
            return turn
        if round_ == MAX_ROUNDS:
            print(f"[stopped after {MAX_ROUNDS} rounds of tool calls]", file=tools.out)
            return turn
        made: ChatMessage = {
            "role": "assistant",
            "content": turn.content,
            "tool_calls": turn.tool_calls,
        }
        if turn.thinking:
            made["thinking"] = turn.thinking
        messages.append(made)
        messages.extend(tools.run(call) for call in turn.tool_calls)
    raise AssertionError("unreachable: the last round returns")
