"""``localllm bench`` argument parsing: levels, durations, conflicting stop rules."""

from __future__ import annotations

import argparse

import pytest

from localllm.cli.bench import _levels, _seconds
from localllm.cli.main import build_parser
from localllm.loadtest.users import Workload


def test_levels_and_durations() -> None:
    assert _levels("1,10, 50") == [1, 10, 50]
    for bad in ("", "0,1", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            _levels(bad)
    assert _seconds("1.5s") == 1.5
    assert _seconds("2m") == 120.0
    assert _seconds("750ms") == 0.75
    for bad in ("-1s", "0", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            _seconds(bad)


def test_parser_defaults_and_exclusive_stop_rules(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["bench", "-m", "qwen"])
    assert (args.concurrency, args.api, args.mode, args.budget_p95) == (
        [1, 10, 50],
        "ollama",
        "chat",
        None,
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "-m", "q", "--requests", "5", "--duration", "5s"])
    assert "not allowed with" in capsys.readouterr().err


def test_a_level_gets_at_least_one_request_per_user() -> None:
    few = Workload(requests=3)
    assert [few.requests_for(c) for c in (1, 3, 10, 50)] == [3, 3, 10, 50]
    assert [few.raised_for(c) for c in (1, 3, 10)] == [False, False, True]
    assert Workload().requests_for(1) == 10 and Workload().requests_for(50) == 200
    assert not Workload().raised_for(50)
    timed = Workload(duration=2.0)
    assert timed.requests_for(10) is None and not timed.raised_for(10)
