"""Formatting helpers of the CLI: sizes, relative times, tables and the pull progress display."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from localllm.cli import output
from localllm.cli.output import PullProgress, table
from localllm.cli.show import render
from localllm.format import format_bytes, format_duration, processor, time_ago


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (4_700_000_000, "4.7 GB"),
        (274_000_000, "274 MB"),
        (19_400_000, "19 MB"),
        (2_000_000_000_000, "2.0 TB"),
    ],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(
    ("ago", "text"),
    [
        (0.2, "Less than a second ago"),
        (5, "5 seconds ago"),
        (70, "About a minute ago"),
        (130, "2 minutes ago"),
        (3700, "About an hour ago"),
        (3 * 86400, "3 days ago"),
        (15 * 86400, "2 weeks ago"),
        (65 * 86400, "2 months ago"),
        (800 * 86400, "2 years ago"),
    ],
)
def test_time_ago(ago: float, text: str) -> None:
    assert time_ago(1_000_000_000 - ago, now=1_000_000_000) == text


def test_format_duration() -> None:
    assert [format_duration(s) for s in (4.4, 192, 3900)] == ["4s", "3m12s", "1h5m"]


def test_table_aligns_columns() -> None:
    text = table(["NAME", "ID"], [("a-long-name:latest", "0123"), ("b", "4567")])
    assert text.splitlines() == [
        "NAME                  ID",
        "a-long-name:latest    0123",
        "b                     4567",
    ]


LAYER = {"status": "pulling 0123456789ab", "digest": "sha256:" + "0" * 64, "total": 1000}


def test_progress_without_a_terminal_prints_finished_lines_once() -> None:
    out = io.StringIO()
    p = PullProgress(out, interactive=False)
    for event in [
        {"status": "pulling manifest"},
        {**LAYER, "completed": 0},
        {**LAYER, "completed": 500},
        {**LAYER, "completed": 1000},
        {**LAYER, "completed": 1000},
        {"status": "success"},
    ]:
        p.update(event)
    p.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "pulling manifest"
    assert lines[1].startswith("pulling 0123456789ab: 100% ▕█████")
    assert lines[1].endswith("1.0 KB/1.0 KB")
    assert lines[2:] == ["success"]


def test_progress_on_a_terminal_redraws_with_speed_and_eta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter([0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0])
    # Only the module's view of the clock changes, not the process's.
    monkeypatch.setattr(output, "time", SimpleNamespace(monotonic=lambda: next(ticks)))
    out = io.StringIO()
    p = PullProgress(out, interactive=True)
    p.update({"status": "pulling manifest"})
    p.update({**LAYER, "completed": 0})
    p.update({**LAYER, "completed": 250})
    text = out.getvalue()
    assert "\x1b[1F" in text  # moved back up to redraw
    assert "25% ▕██████                   ▏ 250 B/1.0 KB  250 B/s  3s\n" in text


def test_show_render_sections() -> None:
    text = render(
        {
            "details": {
                "family": "llama",
                "parameter_size": "8.0B",
                "quantization_level": "Q4_K_M",
            },
            "model_info": {
                "general.architecture": "llama",
                "llama.context_length": 8192,
                "llama.embedding_length": 4096,
            },
            "capabilities": ["completion", "tools"],
            "parameters": 'stop                           "<|eot_id|>"',
            "license": "L1\nL2\nL3\nL4\n",
        }
    )
    assert "    architecture        llama" in text
    assert "    context length      8192" in text
    assert '    stop    "<|eot_id|>"' in text
    assert "  License\n    L1\n    L2\n    L3\n    ..." in text
    assert "Draft model" not in text


def test_show_render_names_the_draft_model() -> None:
    text = render(
        {
            "details": {"family": "llama"},
            "draft": {
                "digest": "sha256:" + "0" * 64,
                "size": 1,
                "details": {
                    "format": "gguf",
                    "family": "llama",
                    "parameter_size": "1.2B",
                    "quantization_level": "Q8_0",
                },
            },
        }
    )
    assert (
        "  Draft model\n    architecture    llama\n    parameters      1.2B\n"
        "    quantization    Q8_0\n" in text
    )


def test_processor_names_every_place_when_rpc_workers_hold_layers() -> None:
    devices = {"CPU": 400, "gpu-box:50052": 600}
    assert processor(1000, 600, devices) == "60% gpu-box:50052, 40% CPU"
    # Without a worker among the places, the local CPU/GPU split as usual.
    assert processor(1000, 520, {"CPU": 480, "CUDA0": 520}) == "48%/52% CPU/GPU"
