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
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "user", "content": "Weather in <Paris>?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
        },
    ]
    out = render_chat(QWEN_TOOLS, messages, tools=tools, add_generation_prompt=False)
    assert '"name": "get_weather"' in out
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in out
    assert "Weather in <Paris>?" in out  # no HTML escaping


def test_no_template_is_the_plain_text() -> None:
    # As Ollama's default template: a base model continues the text it is given.
    assert render_chat(None, [{"role": "user", "content": "The sky is"}]) == "The sky is"
    out = render_chat(
        "",
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": " and V."},
            {"role": "user", "content": " Then"},
        ],
    )
    assert out == "S\n\nU and V. Then"


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


def test_generation_block_renders_its_body() -> None:
    # transformers' training-mask tag (LFM2.5, poolside Laguna): a no-op for inference,
    # and a ``set`` inside it stays inside, as in transformers' call block.
    source = (
        "{% set x = 1 %}{% generation %}[{{ x }}{% set x = 2 %}{{ x }}]{% endgeneration %}{{ x }}"
    )
    assert render_jinja(source, {}) == "[12]1"


def test_range_is_a_real_range() -> None:
    assert (
        render_jinja("{{ range(3)|length }}/{{ range(3)[1] }}/{{ 2 in range(3) }}", {})
        == "3/1/True"
    )
    assert render_jinja("{{ range(1, 7, 2)|list }}", {}) == "[1, 3, 5]"


def test_tools_and_documents_are_none_when_not_given() -> None:
    source = "{{ tools is none }}/{{ documents is none }}/{{ tools is defined }}"
    assert render_chat(source, [{"role": "user", "content": "x"}]) == "True/True/True"


def test_namespace_refuses_private_names_and_dict_helper() -> None:
    with pytest.raises(TemplateError, match="unsafe"):
        render_jinja("{% set ns = namespace(_x=1) %}", {})
    with pytest.raises(TemplateError, match="unsafe"):
        render_jinja("{% set ns = namespace() %}{% set ns._y = 1 %}", {})
    assert (
        render_jinja("{{ dict(a=1)|tojson }}{{ dict.fromkeys(['k'], 0)|tojson }}", {})
        == '{"a": 1}{"k": 0}'
    )


def test_reasoning_reaches_the_template_under_every_name() -> None:
    source = "{% for m in messages %}{{ m.reasoning_content }}|{{ m.thinking }}{% endfor %}"
    out = render_chat(source, [{"role": "assistant", "content": "4", "thinking": "2+2"}])
    assert out == "2+2|2+2"
