"""/v1 (OpenAI-compatible) routes against the real daemon: the openai client and raw httpx."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.daemon import Daemon
from tests.support.tinymodel import GREEDY
from tests.support.variants import openai_client, serve_shared

GREEDY_KW = {"temperature": 0, "seed": 1}


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serve_shared(tmp_path_factory, names=("tiny", "tiny-embed", "tiny-plain")) as d:
        yield d


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def sse_frames(d: Daemon, path: str, body: object) -> list[str]:
    with httpx.stream("POST", d.url + path, json=body, timeout=60, trust_env=False) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    frames = text.split("\n\n")
    assert frames[-1] == ""  # every frame ends with a blank line
    return frames[:-1]


def test_chat_exact_greedy_non_stream_and_stream(v1: Daemon) -> None:
    c = openai_client(v1)
    r = c.chat.completions.create(model="tiny-plain", messages=user("a"), **GREEDY_KW)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.content == GREEDY["a"]
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (2, len(GREEDY["a"]))
    assert r.usage.total_tokens == 2 + len(GREEDY["a"])

    chunks = list(
        c.chat.completions.create(
            model="tiny-plain",
            messages=user("0"),
            stream=True,
            stream_options={"include_usage": True},
            **GREEDY_KW,
        )
    )
    assert len({ch.id for ch in chunks}) == 1 and len({ch.created for ch in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == GREEDY["0"]  # é and € arrive whole although split over tokens
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(GREEDY["0"]) + 3  # 2 + 3 byte tokens


def test_raw_sse_frames_end_with_done(v1: Daemon) -> None:
    frames = sse_frames(
        v1,
        "/v1/chat/completions",
        {"model": "tiny-plain", "messages": user("x"), "stream": True, **GREEDY_KW},
    )
    assert all(f.startswith("data: ") for f in frames)
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == "yz"
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert not any("usage" in ch for ch in chunks)  # not asked for


def test_max_tokens_stop_and_n(v1: Daemon) -> None:
    c = openai_client(v1)
    r = c.chat.completions.create(model="tiny-plain", messages=user("a"), max_tokens=5, **GREEDY_KW)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("bcdef", "length")
    r = c.chat.completions.create(
        model="tiny-plain", messages=user("a"), max_completion_tokens=3, **GREEDY_KW
    )
    assert r.choices[0].message.content == "bcd"
    r = c.chat.completions.create(model="tiny-plain", messages=user("a"), stop="gh", **GREEDY_KW)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("bcdef", "stop")
    r = c.chat.completions.create(
        model="tiny-plain", messages=user("a"), stop=["e", "c"], **GREEDY_KW
    )
    assert r.choices[0].message.content == "b"
    r = c.chat.completions.create(model="tiny-plain", messages=user("5"), n=3, **GREEDY_KW)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert [ch.message.content for ch in r.choices] == [GREEDY["5"]] * 3
    assert r.usage is not None and r.usage.completion_tokens == 3 * r.usage.completion_tokens // 3
    # Sampled choices: a fixed seed makes the whole answer reproducible.
    kw = {
        "model": "tiny-plain",
        "messages": user("a"),
        "n": 2,
        "temperature": 1.5,
        "seed": 7,
        "max_tokens": 8,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "top_p": 0.9,
    }
    first = [ch.message.content for ch in c.chat.completions.create(**kw).choices]  # type: ignore[call-overload]
    again = [ch.message.content for ch in c.chat.completions.create(**kw).choices]  # type: ignore[call-overload]
    assert first == again


def test_n_streams_interleave_by_index(v1: Daemon) -> None:
    frames = sse_frames(
        v1,
        "/v1/chat/completions",
        {
            "model": "tiny-plain",
            "messages": user("a"),
            "stream": True,
            "n": 3,
            "stream_options": {"include_usage": True},
            **GREEDY_KW,
        },
    )
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    texts = ["", "", ""]
    for ch in chunks[:-1]:
        (choice,) = ch["choices"]
        texts[choice["index"]] += choice["delta"].get("content", "")
    assert texts == [GREEDY["a"]] * 3
    assert chunks[-1]["usage"]["completion_tokens"] == 3 * len(GREEDY["a"])
    assert chunks[-1]["usage"]["prompt_tokens"] == 2


def test_completions_exact_stream_and_echo(v1: Daemon) -> None:
    c = openai_client(v1)
    r = c.completions.create(model="tiny-plain", prompt="hello", **GREEDY_KW)
    assert r.object == "text_completion"
    assert r.choices[0].text == GREEDY["hello"] and r.choices[0].finish_reason == "stop"
    r = c.completions.create(model="tiny-plain", prompt="a", max_tokens=4, echo=True, **GREEDY_KW)
    assert (r.choices[0].text, r.choices[0].finish_reason) == ("abcde", "length")
    parts = list(c.completions.create(model="tiny-plain", prompt="x", stream=True, **GREEDY_KW))
    assert "".join(p.choices[0].text for p in parts) == "yz"
    assert parts[-1].choices[0].finish_reason == "stop"


def test_logprobs(v1: Daemon) -> None:
    c = openai_client(v1)
    r = c.chat.completions.create(
        model="tiny-plain", messages=user("w"), logprobs=True, top_logprobs=2, **GREEDY_KW
    )
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content is not None
    assert "".join(t.token for t in lp.content) == "xyz"
    for t in lp.content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert t.top_logprobs[0].token == t.token  # the greedy pick is the most likely
        assert t.bytes == list(t.token.encode())
    r = c.completions.create(model="tiny-plain", prompt="w", logprobs=1, **GREEDY_KW)
    assert r.choices[0].logprobs is not None


def test_json_schema_response_format_parses_and_validates(v1: Daemon) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "kind": {"enum": ["cat", "dog"]},
            "age": {"type": "integer"},
        },
        "required": ["name", "kind", "age"],
        "additionalProperties": False,
    }
    c = openai_client(v1)
    for seed in (1, 2):
        r = c.chat.completions.create(
            model="tiny",
            messages=user("describe"),
            seed=seed,
            temperature=1.0,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "pet", "schema": schema},
            },
        )
        doc = json.loads(r.choices[0].message.content or "")
        assert list(doc) == ["name", "kind", "age"]
        assert len(doc["name"]) <= 5 and doc["kind"] in ("cat", "dog")
        assert isinstance(doc["age"], int)
    r = c.chat.completions.create(
        model="tiny",
        messages=user("x"),
        seed=3,
        max_tokens=200,
        response_format={"type": "json_object"},
    )
    text = r.choices[0].message.content or ""
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_embeddings_and_models(v1: Daemon) -> None:
    c = openai_client(v1)
    r = c.embeddings.create(model="tiny-embed", input=["abc", "xyz"])  # client asks base64
    assert [d.index for d in r.data] == [0, 1]
    for d in r.data:
        assert math.isclose(sum(x * x for x in d.embedding), 1.0, rel_tol=1e-4)
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens
    raw = httpx.post(
        v1.url + "/v1/embeddings",
        trust_env=False,
        timeout=60,
        json={"model": "tiny-embed", "input": "abc", "dimensions": 8},
    ).json()
    assert raw["object"] == "list" and len(raw["data"][0]["embedding"]) == 8
    assert raw["data"][0]["embedding"] == pytest.approx(
        c.embeddings.create(model="tiny-embed", input="abc", dimensions=8).data[0].embedding,
        rel=1e-5,
    )
    ids = sorted(m.id for m in c.models.list())
    assert ids == ["tiny-embed:latest", "tiny-plain:latest", "tiny:latest"]
    m = c.models.retrieve("tiny")
    assert (m.id, m.object, m.owned_by) == ("tiny:latest", "model", "library")
    assert m.created > 0
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("nope")


def test_errors_have_openai_shape_and_daemon_keeps_serving(v1: Daemon) -> None:
    ok = {"model": "tiny-plain", "messages": user("a")}
    cases: list[tuple[object, int, str]] = [
        ({**ok, "model": "nope"}, 404, "not found"),
        ({"messages": user("a")}, 400, "model is required"),
        ({**ok, "messages": "hi"}, 400, "messages"),
        ({**ok, "messages": []}, 400, "messages"),
        ({**ok, "messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
        ({**ok, "temperature": "hot"}, 400, "temperature"),
        ({**ok, "stream": "yes"}, 400, "stream"),
        ({**ok, "n": 0}, 400, "n must be"),
        ({**ok, "n": 1000}, 400, "n must be"),
        ({**ok, "max_tokens": -1}, 400, "max_tokens"),
        ({**ok, "options": {"num_ctx": 10**9}}, 400, "num_ctx"),
        ({**ok, "top_logprobs": 50, "logprobs": True}, 400, "top_logprobs"),
        ({**ok, "response_format": {"type": "xml"}}, 400, "response_format"),
        (
            {
                **ok,
                "response_format": {"type": "json_schema", "json_schema": {"schema": {"not": {}}}},
            },
            400,
            "format",
        ),
        ({**ok, "tool_choice": {"type": "function", "function": {"name": "f"}}}, 400, "tools"),
        ([1, 2], 400, "JSON object"),
    ]
    for body, status, words in cases:
        r = httpx.post(v1.url + "/v1/chat/completions", json=body, trust_env=False, timeout=60)
        assert r.status_code == status, (body, r.text)
        err = r.json()["error"]
        assert words in err["message"], (body, err)
        assert err["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
        assert err["param"] is None and err["code"] is None
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        r = httpx.post(v1.url + path, content=b"{nope", trust_env=False)
        assert r.status_code == 400 and "invalid JSON" in r.json()["error"]["message"]
    r = httpx.post(
        v1.url + "/v1/embeddings", trust_env=False, json={"model": "tiny-embed", "input": [[1, 2]]}
    )
    assert r.status_code == 400 and "input" in r.json()["error"]["message"]
    r = httpx.post(
        v1.url + "/v1/completions",
        trust_env=False,
        json={"model": "tiny-plain", "prompt": ["a", "b"]},
    )
    assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
    r = httpx.post(
        v1.url + "/v1/chat/completions",
        trust_env=False,
        content=(b'{"model": "tiny-plain", "messages": [], "temperature": NaN}'),
    )
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        openai_client(v1).chat.completions.create(
            model="tiny-plain", messages=user("a"), max_tokens=-1
        )
    r = openai_client(v1).chat.completions.create(
        model="tiny-plain", messages=user("a"), **GREEDY_KW
    )
    assert r.choices[0].message.content == GREEDY["a"]
