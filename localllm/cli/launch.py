"""``localllm launch AGENT``: a coding agent on a local model, in one command.

Checks the agent is installed (else one line with its install command), starts
the daemon if needed, pulls the model when missing, gives it a context large
enough for an agent (``launch_context``: the largest that fits from 64k down,
at least 32k where that fits) through a derived model ``NAME-agent:<ctx>``,
loads it, says what was chosen, and then replaces itself with the agent
(``os.execve``), pointed at the daemon through the agent's own documented
settings (``agents``).  ``--list`` shows the agents, whether each is installed
and what it would set.  Everything this command says goes to stderr, so an
agent's own output (``codex exec``, ``claude -p``) stays clean on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localllm.cli.termsafe import clean

if TYPE_CHECKING:
    from localllm.api.client import Client
    from localllm.cli.agents import Agent, Launch, Setup
    from localllm.cli.launch_context import Choice


class _AgentArgs(argparse.ArgumentParser):
    """Everything after ``--`` is the agent's, flags included, untouched."""

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        args = list(sys.argv[1:] if args is None else args)
        cut = args.index("--") if "--" in args else len(args)
        ns, extras = super().parse_known_args(args[:cut], namespace)
        ns.agent_args = args[cut + 1 :]
        return ns, extras


def register(sub: Any) -> None:
    from localllm.cli.agents import AGENTS

    parser = sub.add_parser(
        "launch",
        help="Start a coding agent (" + ", ".join(AGENTS) + ") on a local model",
        usage="localllm launch [-h] [-m MODEL] [--context TOKENS] [--list] [--json] "
        "[AGENT] [-- ARGS ...]",
        description="Start a coding agent on a local model: the daemon, the model (pulled if "
        "needed) and a context large enough for the agent are set up first.  "
        "Arguments after -- go to the agent.",
    )
    parser.__class__ = _AgentArgs
    parser.add_argument("agent", nargs="?", metavar="AGENT", help=", ".join(AGENTS))
    parser.add_argument(
        "-m",
        "--model",
        help="model to use; pulled first when missing (default: pick one of the installed models)",
    )
    parser.add_argument(
        "--context",
        type=_positive,
        metavar="TOKENS",
        help="context length to load the model with, as given (default: the "
        "largest that fits, from 65536 down)",
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the agents, whether each is installed and what it sets",
    )
    parser.add_argument("--json", action="store_true", help="with --list: print JSON")
    parser.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 < value <= 10_000_000:
        raise argparse.ArgumentTypeError("must be between 1 and 10000000")
    return value


def run(args: argparse.Namespace) -> int:
    from localllm.cli.agents import AGENTS
    from localllm.errors import InvalidRequest, LocalLLMError

    if args.list:
        return list_agents(args)
    if not args.agent:
        raise InvalidRequest(
            "name an agent: localllm launch "
            + "|".join(AGENTS)
            + " (localllm launch --list shows them)"
        )
    agent = AGENTS.get(args.agent)
    if agent is None:
        raise InvalidRequest(f"unknown agent {args.agent!r}; known: {', '.join(AGENTS)}")
    path = agent.find()
    if path is None:
        raise LocalLLMError(
            f"{agent.title} is not installed ({agent.executable} is not on "
            f"PATH); install it with: {agent.install}"
        )
    setup = prepare(agent, args.model, args.context)
    folder = Path(tempfile.mkdtemp(prefix="localllm-launch-"))
    launch = agent.configure(setup, folder)
    write_files(launch, folder)
    argv = [agent.executable, *launch.argv, *args.agent_args]
    env = launch.environ(os.environ)
    say(f"Starting {agent.title}: {shlex.join(argv[:1] + args.agent_args)}")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if sys.platform == "win32":  # no exec on Windows: run it and pass its status on
            import subprocess

            return subprocess.call([path, *argv[1:]], env=env)
        os.execve(path, argv, env)
    except OSError as exc:  # not executable, a bad interpreter line, ...
        raise LocalLLMError(f"could not start {path}: {exc.strerror or exc}") from None
    return 0  # not reached


def say(text: str) -> None:
    print(text, file=sys.stderr)


def write_files(launch: Launch, folder: Path) -> None:
    """Write the launch's files (private to this user); drop the folder when there are none."""
    if not launch.files:
        folder.rmdir()
        return
    for path, text in launch.files.items():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)


# -- the model ---------------------------------------------------------------------
def prepare(agent: Agent, model: str | None, context: int | None) -> Setup:
    """Daemon up, model pulled, the agent's model created and loaded: what to point it at."""
    from localllm import config
    from localllm.api.client import Client
    from localllm.cli.agents import Setup
    from localllm.cli.launch_context import (
        AGENT_CONTEXT,
        SLOTS,
        agent_model,
        candidates,
        choose,
        daemon_fit,
        param_context,
        trained_context,
    )
    from localllm.cli.pull import ensure_model
    from localllm.errors import InvalidRequest

    with Client(autostart=True) as client:
        name = model or pick_model(client)
        show = ensure_model(client, name)
        capabilities = show.get("capabilities") or []
        if "embedding" in capabilities or "completion" not in capabilities:
            raise InvalidRequest(f"{name} is not a chat model; {agent.title} needs one")
        if agent.tools and "tools" not in capabilities:
            say(
                f"warning: {name}'s chat template has no tool calls; {agent.title} needs them "
                "to read files and run commands (localllm show MODEL lists capabilities)"
            )
        asked = context or max(AGENT_CONTEXT, param_context(show))
        limit = trained_context(show)
        fit = None if context else daemon_fit(client, name, candidates(asked, limit))
        choice = choose(asked, limit, fit)
        derived = agent_model(name, choice.context).display
        for _ in client.create(
            {
                "model": derived,
                "from": name,
                "parameters": {"num_ctx": choice.context, "num_parallel": SLOTS},
            }
        ):
            pass
        client.load(derived)
        loaded: Mapping[str, Any] = next((m for m in client.ps() if m.get("name") == derived), {})
        got = int(loaded.get("context_length") or choice.context)
        report(name, derived, choice, got, loaded)
        return Setup(client.base_url, derived, got, config.API_KEY.get())


def report(name: str, derived: str, choice: Choice, got: int, loaded: Mapping[str, Any]) -> None:
    """What was chosen and loaded, and why (stderr)."""
    from localllm.cli.launch_context import AGENT_FLOOR
    from localllm.format import format_bytes, processor

    size, vram = int(loaded.get("size") or 0), int(loaded.get("size_vram") or 0)
    where = (
        f", {processor(size, vram, loaded.get('devices'))}, {format_bytes(size)}" if size else ""
    )
    say(f"{derived}: {name} with a {got}-token context{where}")
    notes = choice.notes()
    if got != choice.context:
        notes.append(f"asked for {choice.context}, the daemon loaded {got}")
    if choice.fit is not None:
        notes.append(choice.fit.reason)
    for note in notes:
        say(f"  {note}")
    if got < AGENT_FLOOR:
        say(
            f"warning: agents send 10-30k-token prompts; a {got}-token context may be too "
            "small (a longer prompt is refused with a 400)"
        )


def pick_model(client: Client) -> str:
    """Ask which installed model to use (on a terminal); else say to name one."""
    from localllm.errors import InvalidRequest

    names = [
        m["name"]
        for m in client.list()
        if not str(m.get("name", "")).split(":")[0].endswith("-agent")
    ]
    if not names:
        raise InvalidRequest(
            "no models installed: name one to pull with --model "
            "(e.g. --model hf.co/user/repo:Q4_K_M)"
        )
    if not sys.stdin.isatty():
        raise InvalidRequest(
            "name the model with --model (installed: "
            + ", ".join(names[:10])
            + (", ..." if len(names) > 10 else "")
            + ")"
        )
    for i, n in enumerate(names, 1):
        say(f"  {i:>2}. {clean(n)}")  # names as the daemon lists them: text only
    while True:
        print("Model (number or name) [1]: ", end="", file=sys.stderr, flush=True)
        answer = sys.stdin.readline().strip()
        if not answer:
            return names[0]
        if answer.isdigit() and 1 <= int(answer) <= len(names):
            return names[int(answer) - 1]
        if answer in names or (":" not in answer and f"{answer}:latest" in names):
            return answer


# -- --list ------------------------------------------------------------------------
def describe(agent: Agent, setup: Setup, folder: Path) -> dict[str, Any]:
    """What launching ``agent`` with ``setup`` would run and set (nothing written)."""
    launch = agent.configure(setup, folder)
    env = launch.environ({})
    path = agent.find()
    return {
        "name": agent.name,
        "title": agent.title,
        "installed": path is not None,
        "path": path,
        "install": agent.install,
        "protocol": agent.protocol,
        "argv": [agent.executable, *launch.argv],
        "env": env,
        "unset": list(launch.unset),
        "files": {str(p): text for p, text in launch.files.items()},
    }


def list_agents(args: argparse.Namespace) -> int:
    from localllm import config
    from localllm.cli.agents import AGENTS, Setup
    from localllm.cli.launch_context import AGENT_CONTEXT, agent_model

    model = agent_model(args.model, AGENT_CONTEXT).display if args.model else "MODEL-agent:64k"
    key = "<LOCALLLM_API_KEY>" if config.API_KEY.get() else ""
    setup = Setup(config.client_base_url(), model, AGENT_CONTEXT, key)
    folder = Path(tempfile.gettempdir()) / "localllm-launch-XXXXXXXX"
    entries = [describe(agent, setup, folder) for agent in AGENTS.values()]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    from localllm.cli.output import table

    print(
        table(
            ["AGENT", "NAME", "INSTALLED", "SPEAKS"],
            [
                (e["name"], e["title"], e["path"] or f"no: {e['install']}", e["protocol"])
                for e in entries
            ],
        )
    )
    for e in entries:
        print(f"\n{e['name']}: {shlex.join(e['argv'])} [ARGS]")
        for k, v in e["env"].items():
            print(f"  {k}={shlex.quote(v)}")
        if e["unset"]:
            print(f"  unsets {' '.join(e['unset'])}")
        for p in e["files"]:
            print(f"  writes {p}")
    print(
        f"\nThe model is served with a {AGENT_CONTEXT}-token context when memory allows "
        "(launch says what it chose)."
    )
    return 0
