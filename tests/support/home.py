"""Each test's own LOCALLLM_HOME, with no settings leaking in from the environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Point LOCALLLM_HOME at ``home``, drop settings that would leak in from outside, and
    run models on one thread (below)."""
    monkeypatch.setenv("LOCALLLM_HOME", str(home))
    for var in (
        "LOCALLLM_MODELS",
        "LOCALLLM_HOST",
        "LOCALLLM_API_KEY",
        "LOCALLLM_API_KEYS_FILE",
        "LOCALLLM_TLS_CERT",
        "LOCALLLM_TLS_KEY",
        "LOCALLLM_TLS_CA",
        "LOCALLLM_ORIGINS",
        "LOCALLLM_NOPRUNE",
        "HF_TOKEN",
    ):
        monkeypatch.delenv(var, raising=False)
    # Ollama's variables are fallbacks for ours: a developer's own Ollama setup must not leak in.
    for var in [v for v in os.environ if v.startswith("OLLAMA_")]:
        monkeypatch.delenv(var, raising=False)
    # Nothing in the tests may reach the real Hub, nor Ollama's registry (the tests of
    # registry pulls point it at tests/support/registrystub.py).
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("LOCALLLM_OLLAMA_REGISTRY", "off")
    # One thread per model: the tiny test models need no more, and the runners of two
    # xdist workers, two threads each on 2 cores, spin in ggml's barriers waiting for a
    # thread that is not running. Tests of threading set their own count.
    monkeypatch.setenv("LOCALLLM_NUM_THREAD", "1")
    # A GPU that no plugin serves (a GPU machine running the suite) would add its hint to
    # the output of run, chat and serve; the tests of the hint (tests/cli/test_gpu_hint.py)
    # turn it back on.
    monkeypatch.setenv("LOCALLLM_NO_HINTS", "1")
