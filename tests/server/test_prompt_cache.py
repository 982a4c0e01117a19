"""The prompt cache end to end: it survives a daemon restart, and every API says what it saved.

The model is the tiny one with attention on (its logprobs depend on every cell)
and a template that makes the last message the whole prompt, one token per
character: a prompt of ``LONG`` and a suffix shares ``len(LONG) + 1`` tokens
(BOS included) with any other such prompt, and each request here starts its
suffix with a character no earlier one did, so that is exactly what is cached.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm import paths
from tests.support.daemon import Daemon, start_daemon
from tests.support.models import add_tiny
from tests.support.variants import PLAIN_TEMPLATE, openai_client

LONG = "you are a helpful assistant. answer briefly and cite nothing. " * 8  # 496 tokens
SHARED = len(LONG) + 1  # and BOS
# What clients are told of it: whole blocks of 128 (inference/plan.py), 384 of the 497.
REPORTED = SHARED - SHARED % 128
GREEDY = {"temperature": 0, "seed": 1}


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "2")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "1024")
    monkeypatch.delenv("LOCALLLM_CACHE", raising=False)  # the cache goes under the test's home
    add_tiny(tmp_path, "attn", attention=True, chat_template=PLAIN_TEMPLATE)
    return "attn"


@pytest.fixture
def daemon(tmp_path: Path, model: str) -> Iterator[Daemon]:
    with start_daemon(tmp_path) as d:
        yield d


def generate(d: Daemon, suffix: str) -> dict[str, Any]:
    r = httpx.post(
        d.url + "/api/generate",
        trust_env=False,
        timeout=120,
        json={
            "model": "attn",
            "prompt": LONG + suffix,
            "stream": False,
            "logprobs": True,
            "options": {**GREEDY, "num_predict": 8},
        },
    )
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def written(timeout: float = 30) -> list[Path]:
    """The disk cache's files, once the runner (idle after a reply) has written one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(paths.prompt_cache().glob("*/*.llpc"))
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("no prompt was written to disk")


def test_a_restarted_daemon_takes_the_prefix_from_disk_bit_for_bit(
    tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with start_daemon(tmp_path) as d:
        cold = generate(d, "hi")
        assert cold["prompt_eval_count"] == SHARED + 2 and cold["prompt_cached_count"] == 0
        (first,) = written()
    with start_daemon(tmp_path) as d:  # a new daemon, a new runner: only the disk remains
        warm = generate(d, "go")
    assert warm["prompt_cached_count"] == REPORTED
    assert warm["prompt_eval_count"] == SHARED + 2  # the whole prompt, cached part included
    assert first.exists()
    monkeypatch.setenv("LOCALLLM_PROMPT_CACHE_DISK", "0")
    with start_daemon(tmp_path) as d:
        fresh = generate(d, "go")
    assert fresh["prompt_cached_count"] == 0
    assert warm["response"] == fresh["response"]
    for a, b in zip(warm["logprobs"], fresh["logprobs"], strict=True):
        assert a["token"] == b["token"] and abs(a["logprob"] - b["logprob"]) < 4e-6


def test_every_api_reports_the_cached_prompt_tokens(daemon: Daemon) -> None:
    import anthropic
    import ollama

    assert generate(daemon, "a")["prompt_cached_count"] == 0  # cold: BOS at most, not a block
    oai = openai_client(daemon)
    r = oai.chat.completions.create(
        model="attn",
        messages=[{"role": "user", "content": LONG + "b"}],
        max_tokens=4,
        temperature=0,
    )
    assert r.usage is not None and r.usage.prompt_tokens == SHARED + 1
    assert r.usage.prompt_tokens_details is not None
    assert r.usage.prompt_tokens_details.cached_tokens == REPORTED
    chunks = list(
        oai.chat.completions.create(
            model="attn",
            messages=[{"role": "user", "content": LONG + "c"}],
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == REPORTED

    resp = oai.responses.create(model="attn", input=LONG + "d", max_output_tokens=4, temperature=0)
    assert resp.usage is not None and resp.usage.input_tokens == SHARED + 1
    assert resp.usage.input_tokens_details.cached_tokens == REPORTED

    ant = daemon.keep(
        anthropic.Anthropic(
            base_url=daemon.url,
            api_key="unused",
            max_retries=0,
            http_client=anthropic.DefaultHttpxClient(trust_env=False, timeout=60),
        )
    )
    msg = ant.messages.create(
        model="attn",
        max_tokens=4,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": LONG + "e"}],
    )
    # Anthropic counts what the cache read apart from input_tokens.
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens) == (
        SHARED + 1 - REPORTED,
        REPORTED,
    )
    with ant.messages.stream(
        model="attn",
        max_tokens=4,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": LONG + "f"}],
    ) as s:
        final = s.get_final_message()
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens) == (
        SHARED + 1 - REPORTED,
        REPORTED,
    )

    oll = daemon.keep(ollama.Client(host=daemon.url, trust_env=False, timeout=60))
    got = oll.chat(
        model="attn",
        messages=[{"role": "user", "content": LONG + "g"}],
        options={**GREEDY, "num_predict": 4},
    )
    assert got.prompt_eval_count == SHARED + 1  # the SDK reads the reply; its types drop ours
    raw = httpx.post(
        daemon.url + "/api/chat",
        trust_env=False,
        timeout=60,
        json={
            "model": "attn",
            "messages": [{"role": "user", "content": LONG + "h"}],
            "options": {**GREEDY, "num_predict": 4},
        },
    ).text.splitlines()
    last = json.loads(raw[-1])
    assert last["done"] and last["prompt_cached_count"] == REPORTED
