"""A new conversation with the same system prompt, after a daemon restart, takes the
system prompt's cells back on a sliding-window model (inference/cachehead.py finds the
head from the chat template, engine/checkpoints.py keeps a copy there).

The tiny model built as Gemma 3 (a 32-position window) through the real daemon: the
first conversation's copies are written while the daemon stops on SIGTERM (a graceful
stop), the second conversation starts after it is started again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon, start_daemon
from tests.support.engine_steps import SYSTEM
from tests.support.home import isolate
from tests.support.models import add_tiny

HEAD = SYSTEM * 2  # about 500 tokens: one per character


def chat(d: Daemon, question: str) -> dict[str, Any]:
    body = {
        "model": "swa",
        "messages": [
            {"role": "system", "content": HEAD},
            {"role": "user", "content": question},
        ],
        "stream": False,
        "options": {"temperature": 0, "num_predict": 8},
    }
    r = httpx.post(d.url + "/api/chat", json=body, timeout=120, trust_env=False)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_new_conversation_after_a_restart_reuses_the_system_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    add_tiny(tmp_path, "swa", attention=True, sliding_window=32)
    with start_daemon(tmp_path) as d:
        first = chat(d, "abc")
        assert first["prompt_cached_count"] == 0
    # Stopped by SIGTERM as soon as it answered: its copies were written on the way out.
    assert list((tmp_path / "home").rglob("*.llpc")), "nothing was written to disk"
    with start_daemon(tmp_path) as d:
        second = chat(d, "xyz")
    # The system turn (about 500 tokens), reported in blocks of 128.
    assert second["prompt_cached_count"] >= 384, second
    assert second["prompt_eval_count"] == first["prompt_eval_count"]
