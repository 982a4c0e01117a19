"""An Ollama service override copied as it is: the real daemon started with its environment.

The ``Environment=`` lines are those a user of Ollama's Linux service writes
(systemd's quoting included); ours are unset, so each Ollama variable stands in
for ours, says so in the start-up log and takes effect: the KV cache type in
llama.cpp's own log (visible because OLLAMA_DEBUG asks for it), the trace log,
the queue size in /metrics, the blob a start-up prune would have removed.
The parsing and the planner-side effects are tests/test_ollama_env.py's.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import start_daemon
from tests.support.models import import_gguf
from tests.support.tinymodel import make_tiny_model

OVERRIDE = """\
[Service]
Environment="OLLAMA_KV_CACHE_TYPE=q8_0"
Environment="OLLAMA_FLASH_ATTENTION=1"
Environment="OLLAMA_DEBUG=2"
Environment="OLLAMA_MAX_QUEUE=7"
Environment="OLLAMA_LOAD_TIMEOUT=10m"
Environment="OLLAMA_GPU_OVERHEAD=536870912"
Environment="OLLAMA_SCHED_SPREAD=1"
Environment="OLLAMA_NOPRUNE=true"
Environment="OLLAMA_NOHISTORY=1"
Environment="OLLAMA_LLM_LIBRARY=cpu_avx2"
Environment="OLLAMA_VULKAN=1"
"""


def override_env(text: str) -> dict[str, str]:
    """The variables of ``Environment="NAME=value"`` lines (systemd drops the quotes)."""
    return dict(re.findall(r'^Environment="([A-Z_]+)=(.*)"$', text, re.MULTILINE))


def test_a_copied_ollama_override_just_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = override_env(OVERRIDE)
    assert len(env) == 11
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "256")
    store = Store(paths.models())
    import_gguf(store, parse_name("tiny"), [make_tiny_model(tmp_path / "gguf")])
    orphan = store.blobs.write_bytes(b"a blob no model uses")
    two_hours_ago = time.time() - 7200  # past the start-up prune's grace period
    os.utime(store.blobs.path(orphan), (two_hours_ago, two_hours_ago))

    with start_daemon(tmp_path) as d:
        metrics = httpx.get(d.url + "/metrics", timeout=30).text
        assert re.search(r"^localllm_queue_capacity 7(\.0)?$", metrics, re.MULTILINE)
        r = httpx.post(
            d.url + "/api/chat",
            timeout=120,
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "abc"}],
                "stream": False,
                "options": {"num_predict": 3, "temperature": 0},
            },
        )
        assert r.status_code == 200, r.text
        ps = httpx.get(d.url + "/api/ps", timeout=30).json()["models"]
        assert ps[0]["size_vram"] == 0  # OLLAMA_LLM_LIBRARY=cpu_avx2: the CPU only
        log = d.log.read_text()

    for ollama in env:
        if ollama != "OLLAMA_VULKAN":
            assert f"LOCALLLM_{ollama.removeprefix('OLLAMA_')} is unset: using {ollama}" in log
    assert "OLLAMA_VULKAN is not used: Vulkan is used when its plugin is installed" in log
    # llama.cpp's own line about the cache, logged at debug level: q8_0 keys and values.
    assert re.search(r"K \(q8_0\):.*V \(q8_0\):", log), log[-3000:]
    assert "TRACE" in log and "ASGI [" in log  # OLLAMA_DEBUG=2: uvicorn's trace log
    assert store.blobs.exists(orphan)  # OLLAMA_NOPRUNE: start-up kept it
