"""``pull --max-rate`` and ``/api/pull``'s ``max_rate`` through the real daemon and the Hub
stand-in: the cap is measured at its rate (issue 37 §3)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from tests.support.daemon import cli_env, free_port, run_cli, start_daemon
from tests.support.hub import padded_gguf
from tests.support.hubstub import HubStub

RATE = 1 << 20  # "1M": 1 MiB/s


def test_max_rate_caps_a_pull_through_the_api_and_the_cli(hub: HubStub, tmp_path: Path) -> None:
    padded_gguf(hub, tmp_path, "acme/Api-GGUF", 2 * RATE, pad=1)
    cli_file = padded_gguf(hub, tmp_path, "acme/Cli-GGUF", 2 * RATE, pad=2)
    with start_daemon(tmp_path) as d:
        stamps: list[tuple[float, int]] = []
        events = []
        body = {"model": "hf.co/acme/Api-GGUF", "max_rate": "1M"}
        with httpx.stream("POST", f"{d.url}/api/pull", json=body, timeout=60, trust_env=False) as r:
            for line in r.iter_lines():
                events.append(json.loads(line))
                if events[-1].get("completed"):
                    stamps.append((time.perf_counter(), events[-1]["completed"]))
        assert events[-1] == {"status": "success"}, events[-1]
        (t0, c0), (t1, c1) = stamps[0], stamps[-1]
        rate = (c1 - c0) / (t1 - t0)  # as the progress stream reports it, ~60 ms apart
        assert 0.85 * RATE <= rate <= 1.15 * RATE, f"{rate / RATE:.3f} of the cap"

        bad = httpx.post(f"{d.url}/api/pull", json={**body, "max_rate": "fast"}, trust_env=False)
        assert bad.status_code == 400 and "invalid size" in bad.text, bad.text

        start = time.perf_counter()
        out = d.cli("pull", "hf.co/acme/Cli-GGUF", "--max-rate", "1M")
        elapsed = time.perf_counter() - start
        assert out.returncode == 0, out.stderr
        assert elapsed >= 0.85 * cli_file.size / RATE  # uncapped, loopback takes a blink


def test_a_bad_max_rate_is_refused_before_the_daemon_is_asked() -> None:
    out = run_cli("pull", "hf.co/a/b", "--max-rate", "fast", env=cli_env(free_port()))
    assert out.returncode == 2
    assert "argument --max-rate: invalid size 'fast'" in out.stderr
