"""Tool calls, thinking and structured output through the ollama and openai client libraries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import ollama
import pytest

from tests.support.daemon import Daemon
from tests.support.tinymodel import LETTERS, tokenize
from tests.support.variants import GREEDY_OPTS, openai_client, serve_shared

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["paris", "tokyo"]}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 3}},
            "required": ["zone"],
        },
    },
}
FORCE = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serve_shared(tmp_path_factory, names=("tiny", "tiny-tools", "tiny-think")) as daemon:
        yield daemon


def oll(d: Daemon) -> ollama.Client:
    return d.keep(ollama.Client(host=d.url, trust_env=False, timeout=60))


def prompt_tokens(text: str) -> int:
    return len(tokenize(text))  # BOS + one token per character (ASCII)


def test_forced_tool_call_round_trip_openai(d: Daemon) -> None:
    c = openai_client(d)
    question = [{"role": "user", "content": "weather in paris"}]
    r = c.chat.completions.create(
        model="tiny-tools",
        messages=question,  # type: ignore[arg-type]
        tools=[WEATHER, CLOCK],
        tool_choice=FORCE,  # type: ignore[list-item]
        temperature=0,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"  # type: ignore[union-attr]
    args = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert args in ({"city": "paris"}, {"city": "tokyo"})
    assert call.id.startswith("call_")
    assert not choice.message.content  # the markup is not content
    # Only the forced tool is offered to the model.
    assert r.usage is not None
    rendered = "tools:get_weather;.user:weather in paris.assistant:"
    assert r.usage.prompt_tokens == prompt_tokens(rendered)

    # Send the result back: the next prompt renders the call and the tool's answer.
    history: list[Any] = [
        *question,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    r2 = c.chat.completions.create(
        model="tiny-tools",
        messages=history,
        tools=[WEATHER],  # type: ignore[list-item]
        temperature=0,
    )
    assert r2.choices[0].finish_reason == "stop" and r2.choices[0].message.tool_calls is None
    rendered = (
        f"tools:get_weather;.user:weather in paris.assistant:<tool_call>get_weather"
        f"({args['city']})</tool_call>.<tool_response>sunny</tool_response>.assistant:"
    )
    assert r2.usage is not None and r2.usage.prompt_tokens == prompt_tokens(rendered)


def test_forced_tool_call_streams_and_required(d: Daemon) -> None:
    c = openai_client(d)
    chunks = list(
        c.chat.completions.create(
            model="tiny-tools",
            messages=[{"role": "user", "content": "t"}],
            tools=[CLOCK],  # type: ignore[list-item]
            tool_choice="required",
            temperature=0,
            stream=True,
        )
    )
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    calls = [tc for dl in deltas for tc in dl.tool_calls or []]
    assert len(calls) == 1 and calls[0].index == 0
    assert calls[0].function is not None and calls[0].function.name == "get_time"
    zone = json.loads(calls[0].function.arguments or "")["zone"]
    assert isinstance(zone, str) and len(zone) <= 3
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(dl.content or "" for dl in deltas)
    # The model has no tool markup of its own (plain tiny): Hermes markup is forced and parsed.
    r = c.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "t"}],
        tools=[WEATHER],
        tool_choice="required",
        temperature=0.9,  # type: ignore[list-item]
        seed=4,
    )
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls is not None
    # tool_choice "none": the tools are not rendered and no call is forced.
    r = c.chat.completions.create(
        model="tiny-tools",
        messages=[{"role": "user", "content": "t"}],
        tools=[WEATHER],
        tool_choice="none",
        temperature=0,
    )  # type: ignore[list-item]
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.tool_calls is None
    assert r.usage is not None and r.usage.prompt_tokens == prompt_tokens("user:t.assistant:")


def test_tool_history_round_trip_ollama_client(d: Daemon) -> None:
    c = oll(d)
    messages: list[Any] = [
        {"role": "user", "content": "weather in tokyo"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "tokyo"}}}],
        },
        {"role": "tool", "tool_name": "get_weather", "content": "rain"},
    ]
    r = c.chat(model="tiny-tools", messages=messages, tools=[WEATHER], options=GREEDY_OPTS)
    rendered = (
        "tools:get_weather;.user:weather in tokyo.assistant:<tool_call>get_weather"
        "(tokyo)</tool_call>.<tool_response>rain</tool_response>.assistant:"
    )
    assert r.prompt_eval_count == prompt_tokens(rendered)
    assert r.done_reason == "stop" and r.message.content == ""


def test_thinking_split_both_clients(d: Daemon) -> None:
    c = oll(d)
    r = c.chat(
        model="tiny-think",
        messages=[{"role": "user", "content": "q"}],
        think=True,
        options=GREEDY_OPTS,
    )
    assert r.message.thinking == LETTERS and r.message.content == ""
    r = c.chat(
        model="tiny-think",
        messages=[{"role": "user", "content": "q"}],
        think=False,
        options=GREEDY_OPTS,
    )
    assert not r.message.thinking and r.message.content == ""
    parts = list(
        c.chat(
            model="tiny-think",
            messages=[{"role": "user", "content": "q"}],
            think=True,
            stream=True,
            options=GREEDY_OPTS,
        )
    )
    assert "".join(p.message.thinking or "" for p in parts) == LETTERS
    assert not "".join(p.message.content or "" for p in parts)
    g = c.generate(model="tiny-think", prompt="q", think=True, options=GREEDY_OPTS)
    assert g.thinking == LETTERS and g.response == ""

    o = openai_client(d)
    res = o.chat.completions.create(
        model="tiny-think",
        messages=[{"role": "user", "content": "q"}],
        reasoning_effort="low",
        temperature=0,
    )
    assert (res.choices[0].message.model_extra or {}).get("reasoning") == LETTERS
    assert res.choices[0].message.content == ""
    chunks = list(
        o.chat.completions.create(
            model="tiny-think",
            messages=[{"role": "user", "content": "q"}],
            reasoning_effort="high",
            temperature=0,
            stream=True,
        )
    )
    reasoning = "".join(
        (ch.choices[0].delta.model_extra or {}).get("reasoning") or ""
        for ch in chunks
        if ch.choices
    )
    assert reasoning == LETTERS


def test_format_schema_ollama_client(d: Daemon) -> None:
    schema = {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "integer"},
            "tag": {"enum": ["x", "y"]},
        },
        "required": ["ok", "n", "tag"],
    }
    c = oll(d)
    for seed in (1, 2, 3):
        r = c.chat(
            model="tiny",
            messages=[{"role": "user", "content": "go"}],
            format=schema,
            options={"seed": seed, "temperature": 1},
        )
        doc = json.loads(r.message.content or "")
        assert isinstance(doc["ok"], bool) and doc["tag"] in ("x", "y")
        assert isinstance(doc["n"], int) and not isinstance(doc["n"], bool)
    g = c.generate(model="tiny", prompt="go", format=schema, options={"seed": 9})
    assert set(json.loads(g.response)) == {"ok", "n", "tag"}
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(
            model="tiny",
            messages=[{"role": "user", "content": "go"}],
            format={"not": {"type": "string"}},
        )
    assert err.value.status_code == 400 and "invalid format" in err.value.error
