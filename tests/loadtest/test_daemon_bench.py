"""bench/daemon_bench.py: its requests against the real daemon, and the arithmetic of its table.

The benchmark itself needs llama.cpp's tools and minutes of quiet CPU; what it
measures through the daemon and how it turns rounds into ratios are checked here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from localllm.loadtest.protocols import Target
from localllm.loadtest.users import make_client
from tests.support.daemon import Daemon

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import daemon_bench  # bench/ is a folder of scripts, not a package

pytestmark = pytest.mark.slow


def _target(daemon: Daemon) -> Target:
    return Target(daemon.url, "tiny", api="ollama", mode="completion", options={"temperature": 0})


def test_both_stream_modes_give_daemon_and_client_rates(bench_daemon: Daemon) -> None:
    # Raw "hello world A": BOS + 13 one-character tokens; "A" loops, so all 8 come.
    async def run() -> list[dict[str, float]]:
        target = _target(bench_daemon)
        async with make_client(target, 1, 120) as http:
            return [
                await daemon_bench.ours(http, target, "hello world A", 8, stream)
                for stream in (False, True)
            ]

    plain, streamed = asyncio.run(run())
    for out, sfx in ((plain, ""), (streamed, "_s")):
        assert (out["prompt_tokens"], out["eval_count"]) == (14, 8)
        assert out["prefill" + sfx] > 0 and out["decode" + sfx] > 0
        assert out["e2e" + sfx] == pytest.approx(22 / out["wall" + sfx])
    assert "ttft" not in plain
    # The client's clock: the first token comes before the end.
    assert 0 < streamed["ttft"] < streamed["wall_s"]
    assert streamed["ttft_rate"] == pytest.approx(14 / streamed["ttft"])
    assert streamed["client_decode"] > 0


def test_calibration_lands_within_a_word_of_the_target(bench_daemon: Daemon) -> None:
    async def run() -> tuple[int, int]:
        target = _target(bench_daemon)
        async with make_client(target, 1, 120) as http:
            return await daemon_bench.calibrate(http, target, 64, salt=5)

    n_words, n = asyncio.run(run())
    # One token a character on the tiny model: a word (up to 8 letters and a
    # space) is the finest step the prompt can take.
    assert abs(n - 64) <= 9
    assert 4 <= n_words < 64


def _rounds() -> list[dict[str, Any]]:
    ours = [(100.0, 50.0), (90.0, 52.0), (120.0, 45.0)]
    theirs = [(100.0, 50.0), (100.0, 40.0), (110.0, 50.0)]
    return [
        {"ours": {"prefill": p, "decode": d, "ttft": 1.0}, "theirs": {"pp": pp, "tg": tg}}
        for (p, d), (pp, tg) in zip(ours, theirs, strict=True)
    ]


def test_rows_are_ratios_of_medians_with_the_spread_between_rounds() -> None:
    rows = {r["key"]: r for r in daemon_bench.summarize(_rounds(), prompt=100, gen=11)}
    assert set(rows) == {"prefill", "decode"}  # only what the rounds measured
    pre, dec = rows["prefill"], rows["decode"]
    assert (pre["ours"], pre["theirs"], pre["ratio"]) == (100.0, 100.0, 1.0)
    assert pre["round_ratios"] == pytest.approx([1.0, 0.9, 120 / 110])
    assert pre["spread_ours"] == pytest.approx(0.3) and pre["spread_theirs"] == pytest.approx(0.1)
    assert pre["met"] is True
    assert dec["ratio"] == pytest.approx(50 / 50) and dec["round_ratios"][1] == 1.3
    # A 0.97x median is below the 0.98x goal.
    slow = _rounds()
    for r in slow:
        r["ours"]["decode"] = r["theirs"]["tg"] * 0.97
    assert daemon_bench.summarize(slow, 100, 11)[1]["met"] is False


def test_llama_bench_end_to_end_is_its_prefill_and_decode_times() -> None:
    # 100 tokens at 100 tok/s, then 10 more steps at 10 tok/s: 111 tokens in 2 s.
    rates = daemon_bench.anchor_rates({"pp": 100.0, "tg": 10.0}, prompt=100, gen=11)
    assert rates["e2e"] == rates["e2e_s"] == pytest.approx(55.5)
    assert rates["decode_s"] == rates["client_decode"] == 10.0


def test_report_names_the_cpu_the_load_and_each_row() -> None:
    rounds = _rounds()
    info = {
        "rows": daemon_bench.summarize(rounds, 100, 11),
        "cpu": daemon_bench.machine(),
        "prompt": 100,
        "ps": {"context_length": 4096},
        "commit": "abc",
        "rounds": rounds,
        "bench_commit": "0c1e570",
        "load": (0.2, 1.9),
    }
    args = argparse.Namespace(threads=2, output_tokens=11, rounds=3, reps=1, ngl=0, no_repack=False)
    text = "\n".join(daemon_bench.report(args, Path("m.gguf"), info))
    if sys.platform.startswith("linux"):
        assert info["cpu"]["model"] != "unknown" and info["cpu"]["flags"]
    assert f"cpu: {info['cpu']['model']}" in text
    assert "load average 0.20 before, 1.90 after" in text
    assert (
        "| prefill tok/s, daemon timings, stream false | 100.0 | 100.0 | 1.000x | "
        "0.90-1.09 | 30%/10% | >= 0.98 ok |" in text
    )
    assert "only 3 round(s)" in text
