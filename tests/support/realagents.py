"""The real coding agents, as users install them, in a cache outside the repo.

Owned by the test suite.  ``PINS`` names each agent's package and the version the
suite is checked against; ``python -m tests.support.realagents install`` installs
them (``.ci/run`` does, before the tests): the npm agents with ``npm install
--prefix``, aider with pip into a virtual environment of its own.  ``--latest``
installs each one's newest release beside them, for the run that says what the
next version changes (``tests/agents``, ``LOCALLLM_TEST_AGENTS_CHANNEL=latest``).

Layout: ``$LOCALLLM_TEST_AGENTS`` (default ``~/.cache/localllm/test-agents``) /
``pinned`` or ``latest`` / NAME, each with ``installed.json``: the version installed,
or the error that stopped the install (the registry unreachable, say), which the
tests give as their reason to skip.  The ``table`` command prints docs/agents.md's
table of the versions checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pin:
    name: str  # localllm launch NAME
    package: str
    version: str
    registry: str  # "npm" or "pypi"
    executable: str


PINS: dict[str, Pin] = {
    p.name: p
    for p in (
        Pin("claude", "@anthropic-ai/claude-code", "2.1.332", "npm", "claude"),
        Pin("codex", "@openai/codex", "0.171.0", "npm", "codex"),
        Pin("opencode", "opencode-ai", "1.18.33", "npm", "opencode"),
        Pin("aider", "aider-chat", "0.86.2", "pypi", "aider"),
    )
}
CHANNELS = ("pinned", "latest")
INSTALL_TIMEOUT = 600  # seconds, one agent


def cache() -> Path:
    root = os.environ.get("LOCALLLM_TEST_AGENTS")
    return Path(root) if root else Path.home() / ".cache" / "localllm" / "test-agents"


def channel() -> str:
    """Which install the tests run: ``pinned`` (the default) or ``latest``."""
    value = os.environ.get("LOCALLLM_TEST_AGENTS_CHANNEL", "pinned")
    return value if value in CHANNELS else "pinned"


def folder(name: str, which: str | None = None) -> Path:
    return cache() / (which or channel()) / name


def bin_dir(pin: Pin, which: str | None = None) -> Path:
    base = folder(pin.name, which)
    return base / ("node_modules/.bin" if pin.registry == "npm" else "venv/bin")


def status(name: str, which: str | None = None) -> dict[str, str]:
    """``installed.json`` of an agent: ``version``, or ``error``."""
    try:
        data = json.loads((folder(name, which) / "installed.json").read_text())
    except (OSError, ValueError):
        return {"error": "not installed: run python -m tests.support.realagents install"}
    return data if isinstance(data, dict) else {"error": "installed.json is damaged"}


def find(name: str) -> tuple[Path | None, str]:
    """(the executable, its version), or (None, why it is missing)."""
    pin = PINS[name]
    state = status(name)
    path = bin_dir(pin) / pin.executable
    if "version" in state and path.is_file():
        return path, state["version"]
    return None, state.get("error", f"{path} is missing")


def _installed_version(pin: Pin, base: Path) -> str:
    if pin.registry == "npm":
        meta = base / "node_modules" / pin.package / "package.json"
        return str(json.loads(meta.read_text())["version"])
    out = subprocess.run(
        [str(base / "venv/bin/python"), "-m", "pip", "show", pin.package],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(
        line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Version:")
    )


def install(pin: Pin, which: str) -> dict[str, str]:
    """Install one agent (``which``: pinned or latest); its ``installed.json``."""
    base = folder(pin.name, which)
    base.mkdir(parents=True, exist_ok=True)
    spec = pin.version if which == "pinned" else "latest"
    if pin.registry == "npm":
        steps = [
            [
                "npm",
                "install",
                "--prefix",
                str(base),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                f"{pin.package}@{spec}",
            ]
        ]
    else:
        req = f"{pin.package}=={pin.version}" if which == "pinned" else pin.package
        venv = base / "venv"
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--upgrade", req],
        ]
    started = time.monotonic()
    try:
        for argv in steps:
            subprocess.run(
                argv, check=True, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
            )
        state = {"version": _installed_version(pin, base)}
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or exc.stdout or "").strip().splitlines()[-3:]
        state = {"error": f"{' '.join(exc.cmd[:3])} ... failed: {' / '.join(tail)}"}
    except (OSError, subprocess.TimeoutExpired, StopIteration, KeyError, ValueError) as exc:
        state = {"error": f"install failed: {exc}"}
    state["seconds"] = f"{time.monotonic() - started:.0f}"
    (base / "installed.json").write_text(json.dumps(state) + "\n")
    return state


def table() -> str:
    """docs/agents.md's table: each agent, the version checked, the API it uses."""
    from localllm.cli.agents import AGENTS

    rows = ["| agent | package | version checked | API it uses |", "|---|---|---|---|"]
    for pin in PINS.values():
        agent = AGENTS[pin.name]
        where = "npm" if pin.registry == "npm" else "the package index"
        rows.append(
            f"| {agent.title} (`{pin.name}`) | `{pin.package}` ({where}) | {pin.version} "
            f"| {agent.protocol} |"
        )
    return "\n".join(rows) + "\n"


def report(junit: Path) -> list[str]:
    """One line per agent from a ``--junitxml`` run at ``latest``: its version against the
    pinned one, and the outcome (said in words, so no test runner's closing line is
    mistaken for CI's own)."""
    import xml.etree.ElementTree as ET

    outcome: dict[str, str] = {}
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError) as exc:
        return [f"agents at @latest: no report ({exc})"]
    for case in cases:
        name = case.get("name", "")
        agent = name[name.find("[") + 1 : -1] if "[" in name else ""
        if agent not in PINS:
            continue
        kinds = {child.tag for child in case}
        outcome[agent] = (
            "FAILS (see the log above)"
            if kinds & {"failure", "error"}
            else "skipped"
            if "skipped" in kinds
            else "works"
        )
    lines = []
    for pin in PINS.values():
        latest = status(pin.name, "latest")
        version = latest.get("version") or f"not installed ({latest.get('error')})"
        change = "same as pinned" if version == pin.version else f"pinned {pin.version}"
        lines.append(
            f"agents at @latest: {pin.name} {version} ({change}): "
            f"{outcome.get(pin.name, 'not run')}"
        )
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["table"]:
        print(table(), end="")
        return 0
    if argv[:1] == ["report"] and len(argv) == 2:
        print("\n".join(report(Path(argv[1]))))
        return 0
    if argv[:1] != ["install"]:
        print("usage: python -m tests.support.realagents install [--latest] [NAME ...]")
        print("       python -m tests.support.realagents table | report JUNIT.xml")
        return 2
    which = "latest" if "--latest" in argv else "pinned"
    names = [a for a in argv[1:] if not a.startswith("--")] or list(PINS)
    for name in names:
        state = install(PINS[name], which)
        got = state.get("version") or state.get("error")
        print(f"{which} {name}: {got} ({state['seconds']} s)", flush=True)
    return 0  # a failed install is the tests' skip reason, not CI's failure


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
