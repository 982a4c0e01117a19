"""The CLI against a daemon that dies mid-answer: one ``Error:`` line, exit 1, no traceback."""

from __future__ import annotations

import subprocess

import pytest

from tests.support import forkserver
from tests.support.daemon import REPO, cli_env
from tests.support.halfstream import HalfStreamServer


def _cli(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run(list(args), cli_env(port), cwd=REPO, timeout=60)


@pytest.mark.parametrize(
    ("mode", "args"),
    [
        ("close", ["run", "m", "hi"]),
        ("reset", ["run", "m", "hi"]),
        ("close", ["pull", "m"]),
        ("close", ["ps"]),
    ],
)
def test_a_daemon_lost_mid_answer_is_one_error_line(mode: str, args: list[str]) -> None:
    with HalfStreamServer(mode) as server:
        out = _cli(server.port, *args)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    cause = "ReadError" if mode == "reset" else "RemoteProtocolError"
    assert errors == [
        f"Error: connection to the daemon lost ({cause}) at {server.url}; is it still running?"
    ]
    if args[0] == "run" and mode == "close":
        assert out.stdout == "Hello\n"  # what arrived before the cut, ended on a fresh line
