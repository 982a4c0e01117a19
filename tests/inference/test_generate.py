"""/api/generate, /api/chat, /api/embed, /api/ps against the real daemon and engine."""

from __future__ import annotations

import concurrent.futures
import json
import math
from collections.abc import Iterator

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.tinymodel import CHAT_TEMPLATE, GREEDY, LOOP_PROMPT, expected_greedy
from tests.support.variants import serve_shared

GREEDY_OPTS = {"temperature": 0, "seed": 1}


def post(d: Daemon, path: str, body: object, timeout: float = 60) -> httpx.Response:
    return httpx.post(d.url + path, json=body, timeout=timeout, trust_env=False)


def stream_lines(d: Daemon, path: str, body: object) -> list[dict]:
    with httpx.stream("POST", d.url + path, json=body, timeout=60, trust_env=False) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in r.iter_lines() if line]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """``tiny`` and ``tiny-embed`` as ``tiny_daemon`` serves them, for tests that change nothing."""
    with serve_shared(tmp_path_factory, names=("tiny", "tiny-embed")) as d:
        yield d


def test_generate_raw_exact_greedy_stream_and_metrics(shared: Daemon) -> None:
    lines = stream_lines(
        shared,
        "/api/generate",
        {"model": "tiny", "prompt": "a", "raw": True, "options": GREEDY_OPTS},
    )
    assert "".join(x["response"] for x in lines) == GREEDY["a"]
    assert all(not x["done"] for x in lines[:-1])
    final = lines[-1]
    assert final["done"] is True and final["done_reason"] == "stop"
    assert final["eval_count"] == len(GREEDY["a"])  # one token per letter; EOS not counted
    assert final["prompt_eval_count"] == 2  # BOS + "a"
    for key in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(final[key], int) and final[key] >= 0
    assert final["total_duration"] >= final["eval_duration"] > 0
    assert "context" not in final  # raw mode returns no context


def test_generate_num_predict_and_stop(shared: Daemon) -> None:
    r = post(
        shared,
        "/api/generate",
        {
            "model": "tiny",
            "prompt": "a",
            "raw": True,
            "stream": False,
            "options": {**GREEDY_OPTS, "num_predict": 5},
        },
    )
    body = r.json()
    assert body["response"] == expected_greedy("a", 5) == "bcdef"
    assert body["done_reason"] == "length"
    r = post(
        shared,
        "/api/generate",
        {
            "model": "tiny",
            "prompt": "a",
            "raw": True,
            "stream": False,
            "options": {**GREEDY_OPTS, "stop": ["gh"]},
        },
    )
    assert r.json()["response"] == "bcdef"


def test_speculative_ngram_option_same_text_and_draft_counts(shared: Daemon) -> None:
    copy = "abcdefghijklmnop.abcd"  # after "abcd" the prompt went on: drafts agree
    body = {"model": "tiny", "prompt": copy, "raw": True, "stream": False}
    plain = post(
        shared, "/api/generate", {**body, "options": {**GREEDY_OPTS, "speculative": "off"}}
    ).json()
    spec = post(
        shared,
        "/api/generate",
        {**body, "options": {**GREEDY_OPTS, "speculative": "ngram", "draft_num_predict": 6}},
    ).json()
    assert spec["response"] == plain["response"] == expected_greedy(copy)
    assert spec["eval_count"] == plain["eval_count"] and "draft_count" not in plain
    assert 0 < spec["draft_accepted_count"] <= spec["draft_count"]
    metrics = httpx.get(shared.url + "/metrics", trust_env=False).text
    assert (
        f'localllm_draft_accepted_tokens_total{{model="tiny:latest"}} '
        f"{float(spec['draft_accepted_count'])}" in metrics
    )
    r = post(shared, "/api/generate", {**body, "options": {"speculative": "eagle"}})
    assert r.status_code == 400 and "speculative" in r.json()["error"]


def test_generation_shifts_past_the_context_unless_shift_is_false(shared: Daemon) -> None:
    body = {
        "model": "tiny",
        "prompt": LOOP_PROMPT,
        "raw": True,
        "stream": False,
        "options": {**GREEDY_OPTS, "num_predict": 700},
    }  # the context is 512
    shifted = post(shared, "/api/generate", body, timeout=120).json()
    assert (shifted["done_reason"], shifted["eval_count"]) == ("length", 700)
    assert shifted["response"] == "A" * 700
    stopped = post(shared, "/api/generate", {**body, "shift": False}, timeout=120).json()
    assert stopped["done_reason"] == "length" and 400 < stopped["eval_count"] < 512


def test_generate_templated_and_context(shared: Daemon) -> None:
    # The tiny model's template renders "user:<prompt>.assistant:"; "." then ":" end it.
    r = post(
        shared,
        "/api/generate",
        {"model": "tiny", "prompt": "x", "stream": False, "options": GREEDY_OPTS},
    )
    body = r.json()
    assert r.status_code == 200
    assert body["response"] == ""  # ":" has no successor but EOS
    assert body["prompt_eval_count"] == len("user:x.assistant:") + 1
    # prompt + generated tokens (none here: EOS is not part of the context)
    assert body["context"][0] == 1 and len(body["context"]) == body["prompt_eval_count"]
    assert "user:{{" not in CHAT_TEMPLATE  # the expectation above is derived from this template
    r = post(
        shared,
        "/api/generate",
        {
            "model": "tiny",
            "prompt": "y",
            "stream": False,
            "options": GREEDY_OPTS,
            "context": body["context"],
        },
    )
    again = r.json()
    # The old conversation is carried as tokens; the new turn's BOS is not added again.
    assert again["prompt_eval_count"] == len(body["context"]) + len("user:y.assistant:")


def test_chat_stream_exact_text(shared: Daemon) -> None:
    r = post(
        shared,
        "/api/chat",
        {
            "model": "tiny",
            "stream": False,
            "options": {**GREEDY_OPTS, "num_predict": 3},
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    body = r.json()
    assert r.status_code == 200, body
    assert body["message"]["role"] == "assistant"
    assert body["done"] is True and "context" not in body
    assert body["prompt_eval_count"] == len("user:hi.assistant:") + 1


def test_load_and_unload_and_ps(shared: Daemon) -> None:
    r = post(shared, "/api/generate", {"model": "tiny"})
    assert r.status_code == 200
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert lines[-1]["done_reason"] == "load"
    ps = httpx.get(shared.url + "/api/ps", trust_env=False).json()["models"]
    # Other tests of the module may have left tiny-embed loaded.
    (entry,) = [m for m in ps if m["name"] == "tiny:latest"]
    assert entry["size"] > 0 and entry["size_vram"] == 0
    assert entry["context_length"] == 512 and entry["details"]["format"] == "gguf"
    r = post(
        shared, "/api/chat", {"model": "tiny", "messages": [], "keep_alive": 0, "stream": False}
    )
    assert r.json()["done_reason"] == "unload"
    ps = httpx.get(shared.url + "/api/ps", trust_env=False).json()["models"]
    assert "tiny:latest" not in [m["name"] for m in ps]


def test_concurrent_streams_all_finish_with_exact_text(shared: Daemon) -> None:
    prompts = ["a", "x", "hello", "0", "5", ".", "a", "hello"]

    def one(prompt: str) -> str:
        r = post(
            shared,
            "/api/generate",
            {
                "model": "tiny",
                "prompt": prompt,
                "raw": True,
                "stream": False,
                "options": GREEDY_OPTS,
            },
            timeout=120,
        )
        assert r.status_code == 200, r.text
        return str(r.json()["response"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, prompts))
    assert results == [GREEDY[p] for p in prompts]


def test_embed_normalised_batch_and_legacy(shared: Daemon) -> None:
    r = post(shared, "/api/embed", {"model": "tiny-embed", "input": ["abc", "abd", "xyz"]})
    body = r.json()
    assert r.status_code == 200, body
    vecs = body["embeddings"]
    assert len(vecs) == 3 and body["prompt_eval_count"] > 0
    for v in vecs:
        assert math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4)
    dot = sum(a * b for a, b in zip(vecs[0], vecs[1], strict=True))
    far = sum(a * b for a, b in zip(vecs[0], vecs[2], strict=True))
    assert dot > far
    r = post(shared, "/api/embed", {"model": "tiny-embed", "input": "abc", "dimensions": 8})
    (short,) = r.json()["embeddings"]
    assert len(short) == 8
    r = post(shared, "/api/embeddings", {"model": "tiny-embed", "prompt": "abc"})
    assert len(r.json()["embedding"]) == len(vecs[0])


def test_bad_requests_are_clear_4xx_and_daemon_keeps_serving(shared: Daemon) -> None:
    cases = [
        ({"model": "nope", "prompt": "a"}, 404, "not found"),
        ({"prompt": "a"}, 400, "model is required"),
        ({"model": "tiny", "prompt": "a", "options": {"num_ctx": 10**9}}, 400, "num_ctx"),
        ({"model": "tiny", "prompt": "a", "options": {"num_predict": -5}}, 400, "num_predict"),
        ({"model": "tiny", "prompt": "a", "options": {"temperature": "hot"}}, 400, "temperature"),
        ({"model": "tiny", "prompt": "a", "stream": "yes"}, 400, "stream"),
        ({"model": "tiny", "prompt": "a", "format": "xml"}, 400, "format"),
        ({"model": "tiny", "prompt": "a", "images": ["aGk="]}, 400, "vision"),
        ({"model": "../../etc/passwd", "prompt": "a"}, 400, "invalid"),
        ({"model": "tiny", "prompt": "a", "keep_alive": "soon"}, 400, "keep_alive"),
    ]
    for body, status, words in cases:
        r = post(shared, "/api/generate", body)
        assert r.status_code == status, (body, r.text)
        assert words in r.json()["error"], (body, r.text)
    r = httpx.post(shared.url + "/api/chat", content=b"{not json", trust_env=False)
    assert r.status_code == 400
    r = post(
        shared,
        "/api/generate",
        {"model": "tiny", "prompt": "a", "raw": True, "stream": False, "options": GREEDY_OPTS},
    )
    assert r.json()["response"] == GREEDY["a"]


def test_delete_unloads_the_model_first(tiny_daemon: Daemon) -> None:
    assert post(tiny_daemon, "/api/generate", {"model": "tiny"}).status_code == 200
    assert httpx.get(tiny_daemon.url + "/api/ps", trust_env=False).json()["models"]
    r = httpx.request(
        "DELETE", tiny_daemon.url + "/api/delete", json={"model": "tiny"}, trust_env=False
    )
    assert r.status_code == 200
    assert httpx.get(tiny_daemon.url + "/api/ps", trust_env=False).json()["models"] == []
    r = post(tiny_daemon, "/api/generate", {"model": "tiny", "prompt": "a"})
    assert r.status_code == 404
