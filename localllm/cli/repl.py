"""The interactive session of ``localllm run``: ``>>>`` prompt, slash commands, history.

Works the same on a terminal (readline editing and a history file when the
``readline`` module exists) and on a pipe, so scripts and tests can drive it.
With LOCALLLM_NOHISTORY (or Ollama's OLLAMA_NOHISTORY), as after ``/set
nohistory``, earlier lines can still be recalled but nothing new is written to
the history file.  ``/set think``/``nothink`` hold across ``/load``; otherwise a
loaded model that can think does, as ``run`` decides at start.
Each answer streams from one chat request with the whole conversation; Ctrl-C
stops the answer in progress, Ctrl-D or ``/bye`` leaves.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from localllm.cli.chatstream import StreamPrinter, print_stats
from localllm.cli.mcptools import answer
from localllm.cli.repl_text import HELP_SET, HELP_SHOW, help_text, parameters_text
from localllm.cli.session import Session, parse_parameter, parse_think, preload
from localllm.cli.termsafe import clean
from localllm.errors import LocalLLMError

if TYPE_CHECKING:
    from localllm.api.bodies import ChatMessage
    from localllm.api.client import Client
    from localllm.cli.mcptools import ToolLoop

QUOTES = '"""'


class _Exit(Exception):
    """Raised by /bye and end of input."""


class Repl:
    def __init__(
        self,
        client: Client,
        session: Session,
        *,
        tty: bool | None = None,
        tools: ToolLoop | None = None,
    ) -> None:
        self.client = client
        self.s = session
        self.tools = tools  # run --mcp: the MCP tools offered in every question
        self.tty = sys.stdin.isatty() if tty is None else tty
        self.history_file: str | None = None
        from localllm import config

        self.keep_history = not config.NOHISTORY.get()  # write new lines to the file

    # -- input ------------------------------------------------------------------------
    def _line(self, prompt: str) -> str:
        try:
            return input(prompt)
        except EOFError:
            raise _Exit from None

    def read_message(self) -> str:
        """One message: a line, or a ``\"\"\"`` block spanning several lines."""
        line = self._line(">>> ")
        if line.count(QUOTES) % 2 == 0:
            return line
        # An opening \"\"\" without its closing one: read on until a line closes it.
        lines = [line]
        while True:
            more = self._line("... ")
            lines.append(more)
            if QUOTES in more:
                break
        return "\n".join(lines)

    def _setup_readline(self) -> None:
        if not self.tty:
            return
        try:
            import readline
        except ImportError:  # not on every platform; input() still works without it
            return
        from localllm import paths

        path = paths.home() / "history"
        self.history_file = str(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.read_history_file(self.history_file)
        except OSError:
            pass
        readline.set_history_length(1000)

    def _save_history(self) -> None:
        if self.history_file is None or not self.keep_history:
            return
        import readline

        try:
            readline.write_history_file(self.history_file)
        except OSError:
            pass

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> int:
        self._setup_readline()
        try:
            while True:
                try:
                    text = self.read_message()
                except KeyboardInterrupt:
                    print("\nUse Ctrl + d or /bye to exit.")
                    continue
                try:
                    self.handle(text)
                except LocalLLMError as exc:
                    print(f"Error: {clean(str(exc))}", file=sys.stderr)
        except _Exit:
            print()  # leave the terminal (or the output) on a fresh line
            return 0
        finally:
            self._save_history()

    def handle(self, text: str) -> None:
        stripped = text.strip()
        if stripped.startswith(QUOTES):
            self.ask(_unquote(stripped))
        elif stripped.startswith("/"):
            self.command(stripped)
        elif stripped:
            self.ask(text)

    def ask(self, text: str) -> None:
        from localllm.cli.attach import attach

        # Attached images stay in the history: later turns send the same bytes, which
        # the engine's prefix cache recognises instead of encoding the image again.
        asked = len(self.s.messages)
        self.s.messages.append(attach(text))

        def printer() -> StreamPrinter:
            return StreamPrinter(hide_thinking=self.s.hide_thinking, wordwrap=self.s.wordwrap)

        try:
            # With MCP tools, rounds of calls join the history before the answer.
            turn = answer(self.client, self.s, self.s.messages, printer, self.tools)
        except LocalLLMError:
            del self.s.messages[asked:]
            raise
        if turn.content or turn.thinking or turn.tool_calls:
            reply: ChatMessage = {"role": "assistant", "content": turn.content}
            if turn.thinking:
                reply["thinking"] = turn.thinking
            self.s.messages.append(reply)
        else:
            # Nothing came back (or Ctrl-C before the first word): forget the question
            # so that the history keeps alternating user/assistant.
            del self.s.messages[asked:]
        print()
        if self.s.verbose:
            print_stats(turn)

    # -- slash commands ------------------------------------------------------------------
    def command(self, line: str) -> None:
        words = line.split()
        cmd, args = words[0], words[1:]
        if cmd in ("/bye", "/exit"):
            raise _Exit
        if cmd in ("/?", "/help"):
            print(help_text(args))
        elif cmd == "/set":
            self.set(line, args)
        elif cmd == "/show":
            self.show(args)
        elif cmd == "/clear":
            self.s.messages.clear()
            print("Cleared session context")
        elif cmd == "/load":
            self.load(args)
        elif cmd == "/save":
            self.save(args)
        elif cmd == "/list":
            import argparse

            from localllm.cli import list as list_cmd

            list_cmd.run(argparse.Namespace())
        else:
            print(f"Unknown command '{cmd}'. Type /? for help")

    def set(self, line: str, args: list[str]) -> None:
        if not args:
            print(HELP_SET)
            return
        what, rest = args[0], args[1:]
        flags: dict[str, tuple[str, Any, str]] = {
            "verbose": ("verbose", True, "Set 'verbose' mode."),
            "quiet": ("verbose", False, "Set 'quiet' mode."),
            "wordwrap": ("wordwrap", True, "Set 'wordwrap' mode."),
            "nowordwrap": ("wordwrap", False, "Set 'nowordwrap' mode."),
            "noformat": ("format", None, "Disabled format."),
            "history": ("history", True, "Set 'history' mode."),
            "nohistory": ("history", False, "Set 'nohistory' mode."),
        }
        if what in flags:
            attr, value, message = flags[what]
            if attr == "history":
                self._history(bool(value))
            else:
                setattr(self.s, attr, value)
            print(message)
        elif what == "nothink":
            self.s.think, self.s.think_set = False, True
            print("Set 'nothink' mode.")
        elif what == "think":
            self.s.think = parse_think(rest[0]) if rest else True
            self.s.think_set = True
            level = f" (level {self.s.think})" if isinstance(self.s.think, str) else ""
            print(f"Set 'think' mode{level}.")
        elif what == "format":
            if rest != ["json"]:
                print("Only '/set format json' is supported (and /set noformat).")
                return
            self.s.format = "json"
            print("Set format to 'json' mode.")
        elif what == "system":
            text = line.split(None, 2)[2] if len(line.split(None, 2)) > 2 else ""
            self.s.system = _unquote(text.strip())
            print("Set system message.")
        elif what == "parameter":
            if not rest:
                print("Usage: /set parameter <name> <value>")
                return
            name = rest[0]
            try:
                value = parse_parameter(name, rest[1:])
            except LocalLLMError as exc:
                print(f"Couldn't set parameter: {exc}")
                return
            self.s.options[name] = value
            shown = ", ".join(value) if isinstance(value, list) else value
            print(f"Set parameter '{name}' to '{shown}'")
        else:
            print(f"Unknown command '/set {what}'. Type /? for help")

    def _history(self, on: bool) -> None:
        if not on:
            self._save_history()  # what came before stays, as Ollama saves each line
        self.keep_history = on

    def show(self, args: list[str]) -> None:
        if not args:
            print(HELP_SHOW)
            return
        what = args[0]
        info = self.client.show(self.s.model)
        if what == "info":
            from localllm.cli.show import render

            print(render(info))
        elif what == "parameters":
            print(parameters_text(clean(str(info.get("parameters") or "")), self.s.options))
        elif what == "system":
            system = self.s.system if self.s.system is not None else info.get("system")
            print(clean(str(system or "")) or "No system message was specified for this model.")
        elif what in ("template", "license", "modelfile"):
            text = clean(str(info.get(what) or "")).rstrip("\n")  # the model's layers: text only
            print(text or f"No {what} was specified for this model.")
        else:
            print(f"Unknown command '/show {what}'. Type /? for help")

    def load(self, args: list[str]) -> None:
        if len(args) != 1:
            print("Usage: /load <model>")
            return
        from localllm.cli.pull import ensure_model

        info = ensure_model(self.client, args[0])
        print(f"Loading model '{args[0]}'")
        self.s.model = args[0]
        self.s.messages.clear()
        self.s.infer_think(info.get("capabilities") or [])
        preload(self.client, self.s)

    def save(self, args: list[str]) -> None:
        if len(args) != 1:
            print("Usage: /save <model>")
            return
        if not _has_create(self.client):
            print(
                "Couldn't save: /save needs a daemon with model creation, "
                "which this daemon does not offer."
            )
            return
        body: dict[str, Any] = {
            "model": args[0],
            "from": self.s.model,
            "messages": list(self.s.messages),
        }
        if self.s.system is not None:
            body["system"] = self.s.system
        if self.s.options:
            body["parameters"] = dict(self.s.options)
        for _ in self.client.create(body):
            pass  # progress nobody needs to see here; an error line raises
        print(f"Created new model '{args[0]}'")


def _has_create(client: Client) -> bool:
    """Ask the daemon: a route that exists refuses an empty body (400), a missing one is 404/405."""
    try:
        for _ in client.create({}):
            pass
    except LocalLLMError as exc:
        return exc.status not in (404, 405)
    return True


def _unquote(text: str) -> str:
    if text.startswith(QUOTES):
        text = text[len(QUOTES) :]
        end = text.rfind(QUOTES)
        if end >= 0:
            text = text[:end]
    return text.strip("\n")
