"""``localllm ps`` and ``localllm stop`` against the real daemon with the tiny model loaded."""

from __future__ import annotations

import re

import httpx

from localllm.cli.ps import processor, until
from tests.support.daemon import Daemon

HEADER = ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "SLOTS", "UNTIL"]


def ps_rows(d: Daemon) -> list[list[str]]:
    out = d.cli("ps")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.rstrip("\n").splitlines()
    assert header.split() == HEADER
    # Columns are separated by at least 4 spaces; cells hold single spaces ("100% CPU").
    return [re.split(r" {4,}", row.strip()) for row in rows]


def test_ps_lists_the_loaded_model_and_stop_unloads_it(tiny_daemon: Daemon) -> None:
    d = tiny_daemon
    assert ps_rows(d) == []
    assert d.cli("run", "tiny", "--keepalive", "10m", "a").returncode == 0

    (row,) = ps_rows(d)
    name, ident, size, proc, context, slots, until_text = row
    tags = httpx.get(d.url + "/api/tags", trust_env=False).json()["models"]
    digest = next(m["digest"] for m in tags if m["name"] == "tiny:latest")
    assert (name, ident) == ("tiny:latest", digest.removeprefix("sha256:")[:12])
    assert re.fullmatch(r"\d+(\.\d)? (B|KB|MB|GB)", size)
    assert proc == "100% CPU"
    assert context == "512"  # LOCALLLM_CONTEXT_LENGTH of the fixture
    assert slots == "4"  # LOCALLLM_NUM_PARALLEL of the fixture
    assert until_text == "9 minutes from now"

    stopped = d.cli("stop", "tiny")
    assert stopped.returncode == 0, stopped.stderr
    assert ps_rows(d) == []
    again = d.cli("stop", "tiny")
    assert again.returncode == 1
    assert again.stderr.strip() == 'Error: couldn\'t find model "tiny" to stop'

    # keep_alive < 0 keeps it loaded for good.
    assert d.cli("run", "tiny", "--keepalive", "-1", "a").returncode == 0
    assert [r[6] for r in ps_rows(d)] == ["Forever"]


def test_processor_column() -> None:
    assert processor(1000, 0) == "100% CPU"
    assert processor(1000, 1000) == "100% GPU"
    assert processor(1000, 520) == "48%/52% CPU/GPU"
    assert processor(0, 0) == "Unknown"


def test_until_column() -> None:
    now = 1_000_000.0
    cases = {
        -5: "Stopping...",
        0.5: "less than a second from now",
        30: "30 seconds from now",
        90: "about a minute from now",
        299: "4 minutes from now",
        3700: "about an hour from now",
        3 * 86400 + 5: "3 days from now",
        300 * 365 * 86400: "Forever",
    }
    for delta, text in cases.items():
        assert until(now + delta, now) == text, delta
