"""``POST /v1/responses`` end to end: the official openai SDK against the real daemon.

The model is the script model (tests/support/scriptmodel.py) with a ChatML template
that knows tools (Hermes ``<tool_call>`` markup) and ``<think>``: each test
question ends the prompt in its own trigger, so the greedy reply is exactly
the script's text, and the daemon's own parsers turn it into a function call,
reasoning, or plain text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.variants import openai_client, serve

TAIL = "<|im_end|>\n<|im_start|>assistant\n"
HELLO = "Hello there, I am a script."
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is 21 °C and sunny in Paris."
THOUGHT, REPLY = "plan the reply", "Here is my answer."
TEMPLATE = (  # no whitespace control: every newline here is part of the prompt
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>"
    "{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n"
    'Call one with <tool_call>{"name": .., "arguments": ..}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    '{% for c in m.tool_calls or [] %}<tool_call>\n{"name": "{{ c.function.name }}", '
    '"arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n'
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def d(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    gguf = make_script_model(
        tmp_path / "gguf",
        {
            "<|im_start|>assistant\n": HELLO,
            "weather?" + TAIL: CALL,
            "</tool_response>" + TAIL: ANSWER,
            "think?" + TAIL: f"<think>{THOUGHT}</think>{REPLY}",
        },
        eos="<|im_end|>",
        chat_template=TEMPLATE,
    )
    import_gguf(Store(paths.models()), parse_name("script"), [gguf])
    with serve(tmp_path, monkeypatch, names=()) as daemon:
        yield daemon


def test_string_input_and_message_items(d: Daemon) -> None:
    c = openai_client(d)
    r: Any = c.responses.create(model="script", input="hi", temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.output_text == HELLO and r.model == "script"
    (msg,) = r.output
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert r.usage is not None and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.incomplete_details is None

    r = c.responses.create(
        model="script",
        instructions="Be kind.",
        temperature=0,
        input=[
            {"role": "developer", "content": "Short answers."},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "first"}],
            },
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "input_text", "text": "again"}]},
        ],
    )
    assert r.output_text == HELLO
    assert r.instructions == "Be kind."
    longer = r.usage.input_tokens if r.usage else 0
    assert longer > 20  # the whole history was rendered

    # Cut by max_output_tokens: incomplete, with the reason, and a prefix of the answer.
    r = c.responses.create(model="script", input="hi", max_output_tokens=2, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text and HELLO.startswith(r.output_text) and r.output_text != HELLO
    assert r.usage is not None and r.usage.output_tokens == 2


def test_streams_through_both_sdk_helpers(d: Daemon) -> None:
    c = openai_client(d)
    events: list[Any] = list(
        c.responses.create(model="script", input="hi", stream=True, temperature=0)
    )
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == HELLO
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == HELLO
    final = events[-1].response
    assert final.output_text == HELLO and final.usage is not None
    assert final.id == events[0].response.id

    with c.responses.stream(model="script", input="hi", temperature=0) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        response = stream.get_final_response()
    assert text == HELLO and response.output_text == HELLO


def test_function_tool_round_trip(d: Daemon) -> None:
    c = openai_client(d)
    question: list[Any] = [{"role": "user", "content": "weather?"}]
    r: Any = c.responses.create(model="script", input=question, tools=[WEATHER], temperature=0)
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    assert r.output_text == "" and r.status == "completed"

    # The next turn sends the call back with its output; the model then answers in text.
    turn = [
        *question,
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "21 C, sun"},
    ]
    r2 = c.responses.create(model="script", input=turn, tools=[WEATHER], temperature=0)
    assert r2.output_text == ANSWER
    assert [o.type for o in r2.output] == ["message"]

    # Streamed: the call arrives as added -> arguments delta/done -> done.
    events: list[Any] = list(
        c.responses.create(
            model="script", input=question, tools=[WEATHER], temperature=0, stream=True
        )
    )
    kinds = [e.type for e in events]
    args = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(args) == 1 and json.loads(args[0].arguments) == {"city": "Paris"}
    assert (
        kinds.index("response.function_call_arguments.delta")
        < kinds.index("response.function_call_arguments.done")
        < kinds.index("response.output_item.done")
    )
    with c.responses.stream(model="script", input=turn, tools=[WEATHER], temperature=0) as stream:
        assert stream.get_final_response().output_text == ANSWER


def test_reasoning_item_from_thinking(d: Daemon) -> None:
    c = openai_client(d)
    r: Any = c.responses.create(
        model="script", input="think?", reasoning={"effort": "low"}, temperature=0
    )
    assert [o.type for o in r.output] == ["reasoning", "message"]
    reasoning = r.output[0]
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == THOUGHT
    assert r.output_text == REPLY

    events: list[Any] = list(
        c.responses.create(
            model="script", input="think?", stream=True, reasoning={"effort": "high"}, temperature=0
        )
    )
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (thought, text) == (THOUGHT, REPLY)


def _refused(c: openai.OpenAI, words: str, **kw: Any) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model=kw.pop("model", "script"), **kw)
    assert info.value.status_code == 400
    body = info.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    assert words in body["error"]["message"]


def test_bad_input_gets_openai_errors_and_the_daemon_keeps_serving(d: Daemon) -> None:
    c = openai_client(d)
    png = base64.b64encode(b"\x89PNG not really").decode()
    _refused(c, "is not supported", input=[{"type": "mystery_item"}])
    _refused(c, "input must be", input=5)
    _refused(c, "role", input=[{"role": 7, "content": "x"}])
    _refused(c, "cannot be used", input="hi", previous_response_id="r", conversation="c")
    _refused(c, "max_output_tokens", input="hi", max_output_tokens=0)
    _refused(c, "max_output_tokens", input="hi", max_output_tokens=-3)
    _refused(
        c,
        "vision",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "see"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{png}"},
                ],
            }
        ],
    )
    _refused(
        c,
        "base64",
        input=[
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,***"}],
            }
        ],
    )
    _refused(c, "chat template limit", input="x" * (10 << 20))  # 10 MB
    # Past the context (512 here): truncation "disabled", the API's default, refuses it,
    # and "auto" answers from the tail.
    _refused(c, "exceeds the context length", input="x" * 3000)
    r = c.responses.create(model="script", input="x" * 3000, truncation="auto", temperature=0)
    assert r.output_text == HELLO
    with pytest.raises(openai.NotFoundError) as missing:
        c.responses.create(model="nope", input="hi")
    assert missing.value.response.json()["error"]["type"] == "not_found_error"
    # store is accepted and ignored; the daemon still answers exactly.
    r = c.responses.create(model="script", input="hi", store=True, temperature=0)
    assert r.output_text == HELLO
    raw = httpx.post(
        d.url + "/v1/responses",
        content=b"{not json",
        trust_env=False,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"


def test_metadata_is_echoed_within_openais_limits(d: Daemon) -> None:
    c = openai_client(d)
    tags = {f"tag{i:02d}": "v" * 512 for i in range(16)}  # the most OpenAI takes
    events: list[Any] = list(
        c.responses.create(model="script", input="hi", stream=True, temperature=0, metadata=tags)
    )
    assert all(e.response.metadata == tags for e in events if hasattr(e, "response"))
    deep: Any = {"k": {"a": [[[[{"b": "x" * 4000}]]]]}}  # was echoed in every event
    _refused(c, "metadata.k must be a string", input="hi", metadata=deep)
    _refused(c, "at most 512 characters", input="hi", metadata={"k": "v" * 513})
    _refused(c, "at most 16", input="hi", metadata={**tags, "one more": "v"})
    assert c.responses.create(model="script", input="hi", temperature=0).metadata == {}
