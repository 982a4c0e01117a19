"""/v1/messages end to end: the official ``anthropic`` SDK against the real daemon.

Models: ``tiny-plain`` (the prompt is the last message, so the reply is
``GREEDY[text]``), ``tiny`` (a template that renders every message) and
``agent``, a script model (tests/support/scriptmodel.py) with a ChatML template that
teaches Hermes tool calls: its reply to a user turn is a ``get_weather`` call,
its reply after a tool result is ``ANSWER``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.tinymodel import GREEDY, LETTERS, expected_greedy
from tests.support.variants import serve

if TYPE_CHECKING:  # the SDK is imported where used: 1.5 s at collection, in every worker
    import anthropic

CHATML_TAIL = "<|im_start|>assistant\n"
TOOL_TAIL = "</tool_response><|im_end|>\n" + CHATML_TAIL
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is 21 degrees and sunny in Paris."
# ChatML with Hermes-style tools, as Qwen 2.5's template has it, cut down (no "{%-":
# it would eat the newline after <|im_end|> that the triggers end with).
AGENT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "# Tools\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
    'Reply with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n"
    "{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' %}"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% elif m.tool_calls %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls %}<tool_call>\n"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n"
    "</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
# The current SDK has no sampling arguments; older clients send these fields, and so do we.
GREEDY_KW: dict[str, Any] = {"extra_body": {"temperature": 0}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    script = make_script_model(
        tmp_path / "agent",
        {CHATML_TAIL: CALL, TOOL_TAIL: ANSWER},
        eos="<|im_end|>",
        chat_template=AGENT_TEMPLATE,
    )
    import_gguf(Store(paths.models()), parse_name("agent"), [script])
    with serve(
        tmp_path, monkeypatch, names=("tiny", "tiny-plain", "tiny-think"), LOCALLLM_API_KEY="sesame"
    ) as d:
        yield d


def client(d: Daemon, **auth: str) -> anthropic.Anthropic:
    """The SDK pointed at the daemon (no retries, no proxy); ``api_key`` by default."""
    import anthropic

    auth = auth or {"api_key": "sesame"}
    # The SDK's own client class: recent SDKs run on httpx2 and refuse an httpx one.
    http = anthropic.DefaultHttpxClient(trust_env=False, timeout=60)
    return d.keep(anthropic.Anthropic(base_url=d.url, max_retries=0, http_client=http, **auth))


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_create_stream_and_count_tokens(daemon: Daemon) -> None:
    c = client(daemon)
    r = c.messages.create(model="tiny-plain", max_tokens=100, **GREEDY_KW, messages=user("a"))
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.model == "tiny-plain"
    assert [b.type for b in r.content] == ["text"]
    assert r.content[0].text == GREEDY["a"]
    assert r.stop_reason == "end_turn" and r.stop_sequence is None
    assert (r.usage.input_tokens, r.usage.output_tokens) == (2, len(GREEDY["a"]))  # BOS + a

    cut = c.messages.create(model="tiny-plain", max_tokens=5, **GREEDY_KW, messages=user("a"))
    assert cut.content[0].text == expected_greedy("a", 5)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 5
    stopped = c.messages.create(
        model="tiny-plain", max_tokens=100, **GREEDY_KW, messages=user("a"), stop_sequences=["k"]
    )
    assert stopped.content[0].text == "bcdefghij"
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "k")

    with c.messages.stream(
        model="tiny-plain", max_tokens=100, **GREEDY_KW, messages=user("0")
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == GREEDY["0"]  # é, € whole over split tokens
    assert final.content[0].text == GREEDY["0"]
    assert final.stop_reason == "end_turn"
    # The prompt, BOS + "0": what the prompt cache held (BOS, after the requests above) is
    # counted apart from input_tokens, as Anthropic counts it.
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == 2
    assert final.usage.output_tokens == len(GREEDY["0"]) + 3

    # Thinking on: tiny-think's template opens <think>, so the whole reply is thinking.
    with c.messages.stream(
        model="tiny-think",
        max_tokens=2000,
        messages=user("q"),
        thinking={"type": "enabled", "budget_tokens": 1024},
        **GREEDY_KW,
    ) as stream:
        kinds = {e.type for e in stream}
        thought = stream.get_final_message()
    assert "thinking" in kinds  # the SDK's event for a thinking_delta
    assert [(b.type, b.thinking) for b in thought.content] == [("thinking", LETTERS)]

    # The whole conversation, system prompt included, counted by the model's tokenizer.
    convo: dict[str, Any] = {
        "model": "tiny",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": [{"type": "text", "text": "x"}]},
        ],
    }
    counted = c.messages.count_tokens(**convo)
    answered = c.messages.create(max_tokens=3, **GREEDY_KW, **convo)
    prompt = "system:Be brief..user:hello.assistant:hi.user:x.assistant:"  # tiny's template
    read = answered.usage.cache_read_input_tokens or 0
    assert counted.input_tokens == answered.usage.input_tokens + read == 1 + len(prompt)  # BOS


def test_tool_round_trip(daemon: Daemon) -> None:
    c = client(daemon, auth_token="sesame")  # Authorization: Bearer, as Claude Code sends
    r = c.messages.create(
        model="agent", max_tokens=200, **GREEDY_KW, tools=[WEATHER], messages=QUESTION
    )
    assert r.stop_reason == "tool_use"
    uses = [b for b in r.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    assert uses[0].input == {"city": "Paris"} and uses[0].id
    assert all(b.text.strip() == "" for b in r.content if b.type == "text")
    assert c.messages.count_tokens(
        model="agent", tools=[WEATHER], messages=QUESTION
    ).input_tokens == (r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0))

    follow = [
        *QUESTION,
        {"role": "assistant", "content": r.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": uses[0].id, "content": "21 degrees, sunny"}
            ],
        },
    ]
    answer = c.messages.create(
        model="agent", max_tokens=200, **GREEDY_KW, tools=[WEATHER], messages=follow
    )
    assert [b.type for b in answer.content] == ["text"]
    assert answer.content[0].text == ANSWER
    assert answer.stop_reason == "end_turn"

    # Streamed, the call arrives as a tool_use block whose input is one JSON delta.
    with c.messages.stream(
        model="agent", max_tokens=200, **GREEDY_KW, tools=[WEATHER], messages=QUESTION
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "input_json" in kinds and "message_delta" in kinds
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert use.input == {"city": "Paris"} and final.stop_reason == "tool_use"


def _error(d: Daemon, body: Any, **headers: str) -> tuple[int, dict[str, Any]]:
    headers = headers or {"x-api-key": "sesame"}
    r = httpx.post(d.url + "/v1/messages", json=body, headers=headers, timeout=120, trust_env=False)
    return r.status_code, r.json()


def test_bad_input_gets_anthropic_errors_and_the_daemon_keeps_serving(daemon: Daemon) -> None:
    c = client(daemon)
    ok = {"model": "tiny-plain", "max_tokens": 10, "messages": user("x")}
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(b"png").decode(),
        },
    }
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        (
            {k: v for k, v in ok.items() if k != "max_tokens"},
            400,
            "invalid_request_error",
            "max_tokens",
        ),
        ({**ok, "max_tokens": 0}, 400, "invalid_request_error", "max_tokens"),
        (
            {**ok, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            400,
            "invalid_request_error",
            "'video'",
        ),
        (
            {
                **ok,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "%%% not base64 %%%",
                                },
                            }
                        ],
                    }
                ],
            },
            400,
            "invalid_request_error",
            "base64",
        ),
        # A valid image reaches the chat path, which has no vision yet.
        (
            {**ok, "messages": [{"role": "user", "content": [image]}]},
            400,
            "invalid_request_error",
            "vision",
        ),
        ({**ok, "model": "nope"}, 404, "not_found_error", "nope"),
        # Ten megabytes of system prompt: over the template renderer's output cap.
        (
            {**ok, "model": "tiny", "system": "x" * (10 << 20)},
            400,
            "invalid_request_error",
            "chat template limit",
        ),
        # Longer than the context: never silently cut, as Anthropic never does; said in
        # Anthropic's words, which Claude Code reads to compact by the difference.
        (
            {**ok, "model": "tiny", "system": "x" * 5000},
            400,
            "invalid_request_error",
            "prompt is too long: ",
        ),
    ]
    for body, status, kind, needle in cases:
        got, doc = _error(daemon, body)
        assert (got, doc["type"], doc["error"]["type"]) == (status, "error", kind), doc
        assert needle in doc["error"]["message"], doc
    assert re.fullmatch(r"prompt is too long: \d{4} tokens > 511 maximum", doc["error"]["message"])
    got, doc = _error(daemon, ok, **{"x-api-key": "wrong"})
    assert (got, doc["error"]["type"]) == (401, "authentication_error")
    # What the SDK makes of such an answer.
    import anthropic

    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(model="tiny-plain", max_tokens=0, messages=user("x"))
    assert bad.value.status_code == 400
    assert isinstance(bad.value.body, dict) and bad.value.body["error"]["type"] == (
        "invalid_request_error"
    )
    with pytest.raises(anthropic.AuthenticationError):
        client(daemon, api_key="wrong").messages.create(
            model="tiny-plain", max_tokens=5, messages=user("x")
        )
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="nope", messages=user("x"))
    # Still serving, on the same daemon and runner.
    r = c.messages.create(
        model="tiny-plain",
        max_tokens=10,
        **GREEDY_KW,
        messages=user("x"),
        extra_headers={"anthropic-beta": "whatever-2025-01-01"},
    )
    assert r.content[0].text == GREEDY["x"]
