"""The real coding agents, installed as users install them, run by ``localllm launch``.

Claude Code, Codex and opencode come from the npm registry and aider from the
package index, at the versions pinned in tests/support/realagents.py (``.ci/run``
installs them into a cache outside the repo).  Each runs through ``localllm launch
NAME -- <its non-interactive mode>`` against a script model
(tests/support/scriptmodel.py) made for it: to the first turn it answers with a tool
call in that agent's own tool (a shell command that writes ``proof.txt``), and once
the tool's result is in the conversation with a final sentence.  A test passes when
the agent exits 0, the file holds what the command wrote, and the sentence is
printed.  aider edits files from the reply's text instead of tool calls, so its
script is an edit in aider's ``whole`` format.

An agent that could not be installed (the registry unreachable) is skipped with the
install's own error as the reason.  With ``LOCALLLM_TEST_AGENTS_CHANNEL=latest`` the
same tests run each agent's newest release (``.ci/run`` does, without failing CI),
so the next break is seen before users see it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support import realagents
from tests.support.daemon import Daemon, own_daemon
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model

pytestmark = pytest.mark.slow

USER_TAIL = "<|im_start|>assistant\n"
TOOL_TAIL = "</tool_response><|im_start|>assistant\n"
# Teaches Hermes tool calls (``<tool_call>``) and renders only the end of the
# conversation: the agents' 10-30k-token preambles would be several times longer in
# the script model's byte-level vocabulary, and the reply depends on the tail alone.
# After a tool result anywhere in the conversation, the tail is TOOL_TAIL.
TEMPLATE = (
    "{% set ns = namespace(tool=false) %}"
    "{% for m in messages %}{% if m.role == 'tool' %}{% set ns.tool = true %}{% endif %}"
    "{% endfor %}"
    '{% if tools %}Call a tool with <tool_call>{"name": ..., "arguments": ...}</tool_call>\n'
    "{% endif %}"
    "{% if ns.tool %}<tool_response>" + TOOL_TAIL + "{% else %}"
    "<|im_start|>user\n{{ messages[-1].content[-300:] }}<|im_end|>\n" + USER_TAIL + "{% endif %}"
)


def _call(name: str, arguments: dict[str, str]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _proof(agent: str) -> str:
    return f"made by {agent}"


def final(agent: str) -> str:
    return f"The proof file is written, {agent}."


# Each agent's own shell tool, as its current version declares it.
SCRIPTS: dict[str, dict[str, str]] = {
    "claude": {
        USER_TAIL: _call(
            "Bash",
            {"command": f"echo {_proof('claude')} > proof.txt", "description": "Write proof"},
        ),
        TOOL_TAIL: final("claude"),
    },
    "codex": {
        USER_TAIL: _call("exec_command", {"cmd": f"echo {_proof('codex')} > proof.txt"}),
        TOOL_TAIL: final("codex"),
    },
    "opencode": {
        USER_TAIL: _call(
            "bash",
            {"command": f"echo {_proof('opencode')} > proof.txt", "description": "Write proof"},
        ),
        TOOL_TAIL: final("opencode"),
    },
    # aider's "whole" edit format: the file's name, then its whole text fenced.
    "aider": {USER_TAIL: f"{final('aider')}\n\nproof.txt\n```\n{_proof('aider')}\n```\n"},
}
# What follows ``--``: each agent's non-interactive mode, allowed to run its shell tool.
ARGS: dict[str, list[str]] = {
    "claude": ["-p", "Write the proof file.", "--max-turns", "3", "--allowedTools", "Bash"],
    "codex": [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "Write the proof file.",
    ],
    "opencode": ["run", "Write the proof file."],
    "aider": [
        "--message",
        "Write the proof file.",
        "--yes-always",
        "--no-git",
        "--no-check-update",
        "--no-show-release-notes",
        "--no-analytics",
        "--no-pretty",
        "--edit-format",
        "whole",
        "proof.txt",
    ],
}


@pytest.fixture(scope="module")
def agents_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One script model per agent, ``NAME-coder``."""

    def stock(tmp: Path) -> None:
        store = Store(paths.models())
        for agent, scripts in SCRIPTS.items():
            gguf = make_script_model(
                tmp / agent,
                scripts,
                eos="<|im_end|>",
                chat_template=TEMPLATE,
                context=131072,
                longest=12,
            )
            import_gguf(store, parse_name(f"{agent}-coder"), [gguf], params={"temperature": 0})

    with own_daemon(tmp_path_factory, "real-agents", stock) as daemon:
        yield daemon


def agent_env(daemon: Daemon, tmp: Path, bin_dir: Path) -> dict[str, str]:
    """As real-agents.md says to run them here: a private home, no telemetry, no keys."""
    env = {k: v for k, v in daemon.env.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    home = tmp / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        # aider's litellm would fetch a price list from the network at start.
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        NO_COLOR="1",
    )
    return env


@pytest.mark.parametrize("agent", list(SCRIPTS))
def test_the_real_agent_runs_a_tool_and_answers(
    agents_daemon: Daemon, tmp_path: Path, agent: str
) -> None:
    exe, version = realagents.find(agent)
    if exe is None:
        pytest.skip(f"{agent} ({realagents.channel()}) is not installed: {version}")
    work = tmp_path / "work"
    work.mkdir()
    env = agent_env(agents_daemon, tmp_path, exe.parent)
    env["PWD"] = str(work)  # as a shell sets it: opencode runs its commands there
    launch = Path(sys.executable).parent / "localllm"
    argv = [str(launch), "launch", agent, "--model", f"{agent}-coder", "--", *ARGS[agent]]
    out = subprocess.run(
        argv,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    said = f"{agent} {version}: exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    print(said)  # the -rA summary and the latest run's report show each agent's outcome
    assert out.returncode == 0, said
    assert (work / "proof.txt").read_text().strip() == _proof(agent), said
    assert final(agent) in out.stdout, said
    assert f"Starting {agent_title(agent)}" in out.stderr


def agent_title(agent: str) -> str:
    from localllm.cli.agents import AGENTS

    return AGENTS[agent].title


def test_the_docs_name_the_versions_checked() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "agents.md").read_text()
    assert realagents.table() in docs, (
        "docs/agents.md's table is stale: paste `python -m tests.support.realagents table`"
    )
