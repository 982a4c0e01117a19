"""Chat-template rendering: real-world templates render as expected; hostile ones fail fast."""

from __future__ import annotations

import time

import pytest

from localllm.template.chat import render_chat, strip_leading_bos
from localllm.template.jinja import TemplateError, render_jinja

# Shapes of templates as published in GGUF files (written here for the tests).
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
QWEN_TOOLS = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools><|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- for tc in message.tool_calls %}<tool_call>\n"
    '{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}'
    "\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def test_llama3_shape() -> None:
    out = render_chat(LLAMA3, [{"role": "user", "content": " hi "}], bos_token="<s>")
    assert out == (
        "<s><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert strip_leading_bos(out, "<s>").startswith("<|start_header_id|>")


def test_tools_and_tool_calls_render_with_unescaped_json() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    messages = [
        {"role": "user", "content": "Weather in <Paris>?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    ]
    out = render_chat(QWEN_TOOLS, messages, tools=tools, add_generation_prompt=False)
    assert '"name": "get_weather"' in out
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in out
    assert "Weather in <Paris>?" in out  # no HTML escaping


def test_fallback_is_chatml() -> None:
    out = render_chat(None, [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert out == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_raise_exception_and_helpers() -> None:
    with pytest.raises(TemplateError, match="roles must alternate"):
        render_jinja("{{ raise_exception('roles must alternate') }}", {})
    assert len(render_jinja("{{ strftime_now('%Y') }}", {})) == 4
    loop = "{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    assert render_jinja(loop, {}) == "01"


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{{ 'a' * 1000000000 }}",
        "{{ 'x'.ljust(10**9) }}",
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
        "{{ ''.__class__.__mro__ }}",
        "{{ messages.append(1) }}",
        "{% for x in",
    ],
)
def test_hostile_templates_fail_fast(source: str) -> None:
    start = time.monotonic()
    with pytest.raises(TemplateError):
        render_jinja(source, {"messages": []})
    assert time.monotonic() - start < 5.0


def test_output_cap() -> None:
    source = "{% for i in range(900000) %}{{ 'yyyyyyyyyy' }}{% endfor %}"
    with pytest.raises(TemplateError):
        render_jinja(source, {})
