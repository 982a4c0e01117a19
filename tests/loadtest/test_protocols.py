"""Request bodies, stream parsing and the runner's accounting, against a scripted transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from localllm.loadtest import users as runner
from localllm.loadtest.protocols import Target, build_request, parse_line
from localllm.loadtest.users import PromptMaker, Workload, run_level, send_one


def test_request_bodies() -> None:
    t = Target("http://x", "m", options={"temperature": 0})
    path, body = build_request(t, "hi", 5)
    assert path == "/api/chat"
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["options"] == {"temperature": 0, "num_predict": 5} and body["stream"] is True
    path, body = build_request(Target("http://x", "m", mode="completion"), "hi", 5)
    assert (path, body["prompt"], body["raw"]) == ("/api/generate", "hi", True)
    path, body = build_request(Target("http://x", "m", api="openai"), "hi", 5)
    assert path == "/v1/chat/completions" and body["max_tokens"] == 5
    assert body["stream_options"] == {"include_usage": True}
    path, _ = build_request(Target("http://x", "m", api="openai", mode="completion"), "hi", 5)
    assert path == "/v1/completions"
    with pytest.raises(ValueError):
        build_request(Target("http://x", "m", mode="completion"), [{"role": "user"}], 5)
    with pytest.raises(ValueError):
        Target("http://x", "m", api="grpc")


def test_parse_ollama_lines() -> None:
    assert parse_line("ollama", "  ") is None
    c = parse_line("ollama", '{"message": {"content": "Hi"}, "done": false}')
    assert c is not None and (c.text, c.done) == ("Hi", False)
    c = parse_line(
        "ollama",
        json.dumps(
            {
                "response": "",
                "done": True,
                "prompt_eval_count": 12,
                "eval_count": 4,
                "prompt_eval_duration": 3_000_000,
            }
        ),
    )
    assert c is not None and c.done and (c.prompt_tokens, c.output_tokens) == (12, 4)
    assert c.prefill_s == pytest.approx(0.003)
    c = parse_line("ollama", '{"error": "model not found"}')
    assert c is not None and c.error == "model not found"
    with pytest.raises(ValueError):
        parse_line("ollama", "{not json")


def test_parse_openai_lines() -> None:
    assert parse_line("openai", ": keep-alive") is None
    c = parse_line("openai", 'data: {"choices": [{"delta": {"role": "assistant"}}]}')
    assert c is not None and c.text == "" and not c.done
    c = parse_line("openai", 'data: {"choices": [{"delta": {"content": "Yo"}}]}')
    assert c is not None and c.text == "Yo"
    c = parse_line("openai", 'data: {"choices": [{"text": "raw"}]}')
    assert c is not None and c.text == "raw"
    c = parse_line(
        "openai", 'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}'
    )
    assert c is not None and (c.prompt_tokens, c.output_tokens) == (9, 3)
    c = parse_line("openai", "data: [DONE]")
    assert c is not None and c.done
    c = parse_line("openai", 'data: {"error": {"message": "bad"}}')
    assert c is not None and c.error == "bad"


def _scripted(lines_for: list[list[str] | int]) -> httpx.AsyncClient:
    """A client whose n-th request streams ``lines_for[n]`` (an int is an error status)."""
    calls = iter(lines_for)

    async def handler(request: httpx.Request) -> httpx.Response:
        script = next(calls)
        if isinstance(script, int):
            return httpx.Response(script, json={"error": "nope"})

        async def body() -> AsyncIterator[bytes]:
            for line in script:
                await asyncio.sleep(0.01)
                yield (line + "\n").encode()

        return httpx.Response(200, content=body())

    return httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(handler))


OLLAMA_OK = [
    '{"message": {"content": "a"}}',
    '{"message": {"content": "b"}}',
    '{"message": {"content": ""}, "done": true, "eval_count": 2, '
    '"prompt_eval_count": 5, "prompt_eval_duration": 1000000}',
]


def test_send_one_times_a_stream() -> None:
    async def go() -> None:
        async with _scripted([OLLAMA_OK]) as http:
            r = await send_one(http, Target("http://x", "m"), "p", 2)
        assert r.status == "ok" and r.text == "ab"
        assert r.ttft is not None and r.e2e is not None and r.e2e > r.ttft >= 0.01
        assert len(r.itl) == 1 and r.itl[0] >= 0.005
        assert (r.prompt_tokens, r.output_tokens) == (5, 2)

    asyncio.run(go())


def test_errors_and_lost_streams_are_counted_apart() -> None:
    truncated = OLLAMA_OK[:2]  # the server hung up before "done"
    openai_no_done = ['data: {"choices": [{"delta": {"content": "x"}}]}']
    openai_ok = [*openai_no_done, "data: [DONE]"]

    async def go() -> None:
        async with _scripted([truncated, 500, ['{"error": "oom"}']]) as http:
            s, results = await run_level(
                Target("http://x", "m"), Workload(requests=3), 1, client=http
            )
        assert [r.status for r in results] == ["lost", "error", "error"]
        assert (s.ok, s.errors, s.lost) == (0, 2, 1)
        assert "HTTP 500" in results[1].error and results[2].error == "oom"
        target = Target("http://x", "m", api="openai")
        async with _scripted([openai_no_done, openai_ok]) as http:
            _, results = await run_level(target, Workload(requests=2), 1, client=http)
        assert [r.status for r in results] == ["lost", "ok"]
        assert results[1].output_tokens == 1  # no usage chunk: one token per chunk

    asyncio.run(go())


def test_level_runs_exactly_the_requested_count_concurrently() -> None:
    async def go() -> None:
        async with _scripted([OLLAMA_OK] * 7) as http:
            seen: list[int] = []
            s, _ = await run_level(
                Target("http://x", "m"),
                Workload(requests=7),
                3,
                client=http,
                progress=lambda c, res, running, t: seen.append(running),
            )
        assert (s.requests, s.ok) == (7, 7)
        assert s.concurrency == 3 and seen

    asyncio.run(go())


def test_prompts_are_unique_and_calibrated() -> None:
    pm = PromptMaker(100, seed=3)
    a, b = pm.make(), pm.make()
    assert a != b and a.split()[:2] != b.split()[:2]
    # A tokenizer that splits every word into 4 tokens: prompts shrink toward 100 tokens.
    for _ in range(12):
        p = pm.make()
        pm.observe(p, 4 * len(p.split()))
    assert 90 <= 4 * len(pm.make().split()) <= 110


def test_warm_up_calibrates_prompts_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pm = PromptMaker(1000, seed=1)
    probe_words = len(PromptMaker(256, seed=-1).make().split())  # what warm_up will send

    def handler(request: httpx.Request) -> httpx.Response:
        # A tokenizer with 3 tokens per word.
        done = {"done": True, "prompt_eval_count": 3 * probe_words}
        return httpx.Response(200, text=json.dumps(done) + "\n")

    monkeypatch.setattr(
        runner,
        "make_client",
        lambda *a, **k: httpx.AsyncClient(
            base_url="http://x", transport=httpx.MockTransport(handler)
        ),
    )
    res = asyncio.run(runner.warm_up(Target("http://x", "m"), prompts=pm))
    assert res.status == "ok"
    assert pm.tokens_per_word == pytest.approx(3.0)
    assert 950 <= 3 * len(pm.make().split()) <= 1050
