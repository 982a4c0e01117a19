"""``localllm bench`` against the real daemon: every request accounted for, at 1/10/50 users."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localllm.cli.main import main
from tests.support.daemon import Daemon

pytestmark = pytest.mark.slow


def _bench(daemon: Daemon, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    # Greedy: sampling could pick EOS on the tiny model and end an answer early.
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench",
            "--url",
            daemon.url,
            "--model",
            "tiny",
            "--quiet",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "8",
            "--temperature",
            "0",
            "--json",
            str(out),
            *extra,
        ]
    )
    return code, json.loads(out.read_text())


@pytest.mark.parametrize("api", ["ollama", "openai"])
def test_no_errors_no_lost_requests_at_1_10_50_users(
    bench_daemon: Daemon, tmp_path: Path, api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = _bench(
        bench_daemon,
        tmp_path,
        "--api",
        api,
        "--concurrency",
        "1,10,50",
        "--requests",
        "60",
        "--plot",
        str(tmp_path / "plot.png"),
    )
    assert code == 0, capsys.readouterr()
    levels = doc["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 10, 50]
    for lv in levels:
        assert (lv["requests"], lv["ok"], lv["errors"], lv["lost"]) == (60, 60, 0, 0)
        # The load asked for was applied: every user had a request in flight at once.
        assert lv["peak_in_flight"] == lv["concurrency"]
        # Each answer ran to num_predict: nothing was cut short or miscounted.
        assert lv["output_tokens"] == 60 * 8
        assert lv["ttft"]["p50"] <= lv["ttft"]["p95"] <= lv["ttft"]["p99"]
        assert lv["e2e"]["p50"] >= lv["ttft"]["p50"]
        assert lv["itl"]["n"] == 60 * 7
    # 50 users on 4 slots queue: the tail of TTFT must show it.
    assert levels[2]["ttft"]["p95"] > levels[0]["ttft"]["p95"]
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert "E2E p50" in capsys.readouterr().out


def test_too_few_requests_are_raised_to_one_per_user_and_peak_is_measured(
    bench_daemon: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -n 3 at 10 users used to print a "10 users" row with at most 3 ever in flight.
    code, doc = _bench(bench_daemon, tmp_path, "--concurrency", "1,10", "--requests", "3")
    assert code == 0
    one, ten = doc["levels"]
    assert (one["concurrency"], one["requests"], one["ok"], one["peak_in_flight"]) == (1, 3, 3, 1)
    assert (ten["concurrency"], ten["requests"], ten["ok"], ten["peak_in_flight"]) == (
        10,
        10,
        10,
        10,
    )
    assert doc["workload"]["requests"] == 3
    out = capsys.readouterr().out
    assert out.count("note:") == 1
    assert "note: 10 users need at least 10 requests; running 10 instead of 3" in out
    assert "10 users (peak 10 in flight)" in out
    head, row1, row10 = out.split("\n\n", 1)[1].splitlines()[:3]
    assert head.split()[:3] == ["users", "peak", "reqs"]
    assert row1.split()[:3] == ["1", "1", "3"]
    assert row10.split()[:3] == ["10", "10", "10"]


def test_completion_mode_and_duration(bench_daemon: Daemon, tmp_path: Path) -> None:
    code, doc = _bench(
        bench_daemon, tmp_path, "--mode", "completion", "--concurrency", "3", "--duration", "2s"
    )
    assert code == 0
    (lv,) = doc["levels"]
    assert lv["requests"] >= 3 and lv["ok"] == lv["requests"]
    assert lv["peak_in_flight"] == 3


def test_unknown_model_counts_errors_and_exits_1(bench_daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    code = main(
        [
            "bench",
            "--url",
            bench_daemon.url,
            "--model",
            "nope",
            "--quiet",
            "--no-warmup",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--json",
            str(out),
        ]
    )
    assert code == 1
    (lv,) = json.loads(out.read_text())["levels"]
    assert (lv["ok"], lv["errors"], lv["lost"]) == (0, 4, 0)
    assert "404" in lv["error_samples"][0]


def test_budget_prediction_is_checked_by_measurement(bench_daemon: Daemon, tmp_path: Path) -> None:
    code, doc = _bench(
        bench_daemon,
        tmp_path,
        "--concurrency",
        "1,4",
        "--requests",
        "12",
        "--budget-p95",
        "2s",
        "--max-users",
        "16",
    )
    assert code == 0
    budget = doc["budget"]
    assert budget["predicted_users"] >= 1
    assert budget["checks"], "the prediction was not measured"
    assert budget["checks"][0]["users"] == budget["predicted_users"]
    measured = {lv["concurrency"]: lv for lv in doc["levels"]}
    assert budget["answer_users"] == 0 or measured[budget["answer_users"]]["e2e"]["p95"] <= 2.0
