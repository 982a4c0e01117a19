"""What current clients send, accepted: a recorded Claude Code request, Anthropic's newer
fields, and the OpenAI fields of the current SDK (compat/fields.py's rules).

The capture (tests/data/claude_code_2.1.332_first_request.json) is Claude Code 2.1.332's
first request of ``claude -p hello``, recorded here with a listening socket, its long texts
shortened and three of its tools kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localllm.api.schemas_infer import ChatRequest
from localllm.compat.anthropic.request import messages_request_to_native
from localllm.compat.openai.request import chat_request_to_native
from localllm.compat.responses.request import responses_request_to_native
from localllm.errors import InvalidRequest
from localllm.template.select import render_prompt
from localllm.template.systemturns import fold_system

CAPTURE = Path(__file__).parents[1] / "data" / "claude_code_2.1.332_first_request.json"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Mistral's rule, cut down: a system message only first, then user and assistant turns.
STRICT = (
    "{% if messages[0].role == 'system' %}{% set first = messages[0].content + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}"
    "{% set loop_messages = messages %}{% endif %}"
    "{% for m in loop_messages %}"
    "{% if m.role not in ('user', 'assistant') %}"
    "{{ raise_exception('Only user and assistant roles are supported after the first') }}"
    "{% endif %}[{{ m.role }}]{{ first if loop.first else '' }}{{ m.content }}\n{% endfor %}"
    "[assistant]"
)
# A template that reads only the first system message and skips any other.
FIRST_ONLY = (
    "{% if messages[0].role == 'system' %}SYS {{ messages[0].content }}\n{% endif %}"
    "{% for m in messages %}{% if m.role != 'system' %}{{ m.role }}: {{ m.content }}\n"
    "{% endif %}{% endfor %}assistant:"
)


def capture() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(CAPTURE.read_text())["body"]
    return body


def test_the_recorded_claude_code_request_is_accepted_whole() -> None:
    body = capture()
    conv = messages_request_to_native(body)
    ChatRequest.model_validate(conv.native)  # what the route validates next
    messages = conv.native["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "system"]
    # The billing line is not part of the conversation; the instructions are.
    assert "x-anthropic-billing-header" not in json.dumps(messages)
    assert messages[0]["content"].startswith("You are a Claude agent")
    assert messages[1]["content"].endswith("\nhello")
    assert messages[2]["content"].startswith("# Environment")
    # adaptive thinking at effort "high": the high level (its budget comes with it).
    assert conv.native["think"] == "high" and "think_budget" not in conv.native["options"]
    assert conv.omit_thinking  # display: "omitted"
    assert conv.native["options"]["num_predict"] == 32000 and conv.stream
    assert {t["function"]["name"] for t in conv.native["tools"]} == {
        "Read",
        "Bash",
        "Write",
        "DeferredToolPlaceholder",
    }
    assert conv.ignored == ["metadata (user ids are for Anthropic's abuse checks)"]


@pytest.mark.parametrize("template", [CHATML, STRICT, FIRST_ONLY])
def test_its_prompt_holds_the_system_message_and_no_billing_line(template: str) -> None:
    conv = messages_request_to_native(capture())
    prompt = render_prompt(None, template, conv.native["messages"])
    assert "x-anthropic-billing-header" not in prompt and "cc_version" not in prompt
    env = prompt.index("# Environment")
    assert prompt.index("hello") < env  # where the client put it, after the first turn
    if template == CHATML:  # a system turn is allowed there: it stays one
        assert prompt[:env].endswith("<|im_start|>system\n")
    else:  # folded into the user turn before it
        assert "hello\n\n# Environment" in prompt


def test_a_changed_billing_line_keeps_the_prompt_the_same() -> None:
    body = capture()
    first = render_prompt(None, CHATML, messages_request_to_native(body).native["messages"])
    body["system"][0]["text"] = "x-anthropic-billing-header: cc_version=9.9.9; cc_entrypoint=cli;"
    again = render_prompt(None, CHATML, messages_request_to_native(body).native["messages"])
    assert first == again


def test_fold_rule_for_late_system_messages() -> None:
    def sys(text: str) -> dict[str, str]:
        return {"role": "system", "content": text}

    user = {"role": "user", "content": "u"}
    bot = {"role": "assistant", "content": "a"}
    # After a user turn: appended to it.  After an assistant turn: before the next user turn.
    assert fold_system([sys("S"), user, sys("x"), bot, sys("y"), user]) == [
        sys("S"),
        {"role": "user", "content": "u\n\nx"},
        bot,
        {"role": "user", "content": "y\n\nu"},
    ]
    # No user turn after it: into the leading system message (made when missing).
    assert fold_system([user, bot, sys("z")]) == [sys("z"), user, bot]
    assert fold_system([sys("S"), user, bot, sys("z")]) == [sys("S\n\nz"), user, bot]


def test_thinking_effort_and_context_edits() -> None:
    base: dict[str, Any] = {"model": "m", "max_tokens": 10}
    turns = [
        {"role": "user", "content": "q1"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "t1"}, {"type": "text", "text": "a1"}],
        },
        {"role": "user", "content": "q2"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "t2"}, {"type": "text", "text": "a2"}],
        },
        {"role": "user", "content": "q3"},
    ]

    def conv(**extra: Any) -> Any:
        return messages_request_to_native({**base, "messages": turns, **extra})

    def thoughts(c: Any) -> list[str]:
        return [m.get("thinking", "") for m in c.native["messages"] if m["role"] == "assistant"]

    adaptive = {"type": "adaptive"}
    assert conv(thinking=adaptive).native["think"] is True  # no effort: the model's way
    for effort, level, budget in (
        ("low", "low", None),
        ("max", "max", None),
        ("xhigh", "high", -1),
    ):
        c = conv(thinking=adaptive, output_config={"effort": effort})
        assert (c.native["think"], c.native["options"].get("think_budget")) == (level, budget)
    # An exact budget wins over the effort; effort with thinking off changes nothing.
    exact = conv(
        thinking={"type": "enabled", "budget_tokens": 300}, output_config={"effort": "low"}
    )
    assert (exact.native["think"], exact.native["options"]["think_budget"]) == (True, 300)
    assert (
        conv(thinking={"type": "disabled"}, output_config={"effort": "high"}).native["think"]
        is False
    )
    assert "think" not in conv(output_config={"effort": "high"}).native

    edit = {"type": "clear_thinking_20251015"}
    assert thoughts(conv()) == ["t1", "t2"]
    assert thoughts(conv(context_management={"edits": [edit]})) == ["", "t2"]  # keeps 1 turn
    keep_all = {**edit, "keep": "all"}
    assert thoughts(conv(context_management={"edits": [keep_all]})) == ["t1", "t2"]
    none = {**edit, "keep": {"type": "thinking_turns", "value": 0}}
    assert thoughts(conv(context_management={"edits": [none]})) == ["", ""]
    tools_edit = {"type": "clear_tool_uses_20250919"}
    c = conv(context_management={"edits": [tools_edit]})
    assert c.ignored == ["context_management.edits.0 (clear_tool_uses_20250919)"]


def test_server_tools_and_mcp_servers_are_dropped_and_named() -> None:
    schema = {"type": "object", "properties": {}}
    c = messages_request_to_native(
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "web_search_20250305", "name": "web_search"},
                {"name": "Read", "input_schema": schema, "cache_control": {"type": "ephemeral"}},
                {"type": "mcp_toolset", "mcp_server_name": "x"},
            ],
            "mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "x"}],
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
            "brand_new_field": 1,
        }
    )
    assert [t["function"]["name"] for t in c.native["tools"]] == ["Read"]
    assert c.native["format"] == schema
    assert sorted(c.ignored) == sorted(
        [
            "brand_new_field (unknown field)",
            "mcp_servers (1: the MCP connector runs on Anthropic's side)",
            "tools.0 ('web_search_20250305': a server tool)",
            "tools.2 ('mcp_toolset': a server tool)",
        ]
    )


CURRENT_CHAT_FIELDS: dict[str, Any] = {
    "prompt_cache_key": "session-1",
    "prompt_cache_retention": "24h",
    "safety_identifier": "hash",
    "user": "u",
    "service_tier": "auto",
    "store": False,
    "metadata": {"k": "v"},
    "parallel_tool_calls": False,
    "verbosity": "low",
    "prediction": {"type": "content", "content": "x"},
    "modalities": ["text"],
    "web_search_options": {},
}


def test_current_openai_chat_fields_are_ignored_by_name_never_refused() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **CURRENT_CHAT_FIELDS}
    conv = chat_request_to_native(body)
    assert [i.split(" ")[0] for i in conv.ignored] == list(CURRENT_CHAT_FIELDS)
    assert all("(" in i for i in conv.ignored)  # each says why
    with pytest.raises(InvalidRequest, match=r"^audio: audio output is not supported"):
        chat_request_to_native({**body, "audio": {"voice": "alloy", "format": "wav"}})


def test_current_responses_fields_are_ignored_by_name() -> None:
    body = {
        "model": "m",
        "input": "hi",
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        "safety_identifier": "s",
        "service_tier": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"verbosity": "low"},
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f"}],
    }
    conv = responses_request_to_native(body)
    names = [i.split(" (")[0] for i in conv.ignored]
    # ``store`` is honoured now (stored Responses): false keeps the request stateless.
    assert names == [
        "include",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
        "parallel_tool_calls",
        "reasoning.summary",
        "text.verbosity",
        "a 'web_search' tool",
    ]
    assert conv.native["think"] == "low"
