"""The format derived from a chat template (``derive.py``): on the pinned llama.cpp's real
templates that no dedicated parser claims, on the ones that have a dedicated parser (the
derived one must agree with it), and on templates of families that do not exist yet."""

from __future__ import annotations

from typing import Any

import pytest

from localllm.toolcalls import detect_format, format_named
from localllm.toolcalls.derive import derive
from localllm.toolcalls.tagged import IDENT, WILD, Shape
from tests.support import toolcall_samples as s
from tests.support.template_corpus import corpus
from tests.support.toolcall_helpers import check_all_splits, run

SF = [("special_function", {"arg1": 1}, 0, None)]
PARIS = [("get_time", {"city": "Paris"}, 0, None)]

# Real templates no dedicated parser claims, and a reply in each one's markup.
DERIVED: list[tuple[str, str, list[Any]]] = [
    ("Apertus-8B-Instruct", s.APERTUS_CALL, SF),
    ("upstage-Solar-Open-100B", s.SOLAR_CALL, [("get_time", {"city": "Paris"}, 0, "a1b2c3d4e")]),
    ("tencent-Hy3", s.HY3_CALL, PARIS),
    ("GigaChat3-10B-A1.8B", s.GIGACHAT3_CALL, SF),
    ("GigaChat3.1-10B-A1.8B", s.GIGACHAT31_CALL, SF),
    ("MiniMax-M1", s.MINIMAX_M1_CALL, [*SF, ("get_time", {"city": "Paris"}, 1, None)]),
    ("CohereForAI-c4ai-command-r-plus-tool_use", s.COMMAND_R_PLUS_CALL, SF),
]


@pytest.mark.parametrize(("template", "text", "calls"), DERIVED, ids=[d[0] for d in DERIVED])
def test_real_templates_without_a_dedicated_parser(
    template: str, text: str, calls: list[Any]
) -> None:
    source = corpus()[template + ".jinja"]
    assert detect_format(source).name == "derived"
    check_all_splits("derived", text, "", calls, template=source)
    check_all_splits("derived", "Sure. " + text, "Sure. ", calls, template=source)


def test_derived_reasoning_tags() -> None:
    source = corpus()["tencent-Hy3.jinja"]
    fmt = detect_format(source)
    assert fmt.think_tags == ("<think:opensource>", "</think:opensource>")
    assert "<tool_calls:opensource>" in fmt.markers
    content, thinking, calls = run(
        "derived",
        ["plan</think:opensource>" + s.HY3_CALL],
        prompt="<think:opensource>",
        template=source,
    )
    assert (content, thinking, [c.name for c in calls]) == ("", "plan", ["get_time"])


# Templates with a dedicated parser whose format can be derived too: the derived parser
# must read the family's reply exactly as the dedicated one does.
AGREES = [
    ("Qwen-Qwen3-0.6B", s.HERMES_CALL),
    ("Qwen3-Coder", s.XML_CALL),
    ("GLM-4.6", s.GLM_46_CALL.split("</think>\n", 1)[1]),
    ("MiniMax-M2", s.MINIMAX_M2_CALL),
    ("deepseek-ai-DeepSeek-V3.2", s.DSML_CALL),
    ("deepseek-ai-DeepSeek-V4", s.DSML_V4_CALL),
    ("deepseek-ai-DeepSeek-V3.1", s.DEEPSEEK_V31_CALLS.split("CONTENT", 1)[1]),
    ("NVIDIA-Nemotron-Nano-v2", s.NEMOTRON_V2_CALL),
    ("unsloth-Apriel-1.5", s.APRIEL_CALL),
    ("meetkai-functionary-medium-v3.1", s.FUNCTIONARY_V31_CALL),
    ("openbmb-MiniCPM5-1B", s.MINICPM5_CALL),
    ("Kimi-K3", s.KIMI_K3_CALL),
    ("mistralai-Mistral-Nemo-Instruct-2407", s.MISTRAL_NEMO_CALL),
    ("Cohere2MoE", s.COMMAND_R_ACTION),
]


@pytest.mark.parametrize(("template", "text"), AGREES, ids=[a[0] for a in AGREES])
def test_derived_agrees_with_the_dedicated_parser(template: str, text: str) -> None:
    source = corpus()[template + ".jinja"]
    derived = derive(source)
    assert derived is not None
    fmt = detect_format(source)
    want = run(fmt.name, [text], template=source)[2]
    got = run("derived", [text], template=source)[2]
    assert want and [(c.name, c.arguments) for c in got] == [(c.name, c.arguments) for c in want]


# Families that do not exist: each writes its calls its own way, and nothing of ours
# knows any of them.
NEXT = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
NEW_JSON = NEXT + (
    "{% for c in m.tool_calls or [] %}<<call>>{{ c.function.name }}||"
    "{{ c.function.arguments | tojson }}<</call>>{% endfor %}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
NEW_XML = NEXT + (
    "{% if m.tool_calls %}<actions>{% for c in m.tool_calls %}"
    '<act fn="{{ c.function.name }}" n="{{ loop.index }}">'
    "{% for k, v in c.function.arguments.items() %}"
    '<in key="{{ k }}">{{ v }}</in>{% endfor %}</act>{% endfor %}</actions>'
    "{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>"
    "{% endif %}"
)
NEW_LIST = NEXT + (
    "{% if m.tool_calls %}@@calls {{ m.tool_calls | map(attribute='function')"
    " | list | tojson }}{% endif %}<|end|>{% endfor %}"
)


@pytest.mark.parametrize(
    ("template", "text", "shape"),
    [
        (
            NEW_JSON,
            '<<call>>get_time||{"city": "Paris"}<</call>>',
            Shape(call_open="<<call>>", name_end="||", call_close="<</call>>"),
        ),
        (
            NEW_XML,
            '<actions><act fn="get_time" n="1"><in key="city">Paris</in></act></actions>',
            Shape(
                call_open='<act fn="',
                name_end=f'" n="{WILD}">',
                call_close="</act>",
                section_open="<actions>",
                section_close="</actions>",
                json_args=False,
                param_open='<in key="',
                key_end='">',
                param_close="</in>",
            ),
        ),
        (NEW_LIST, '@@calls [{"name": "get_time", "arguments": {"city": "Paris"}}]', None),
    ],
    ids=["json", "xml", "list"],
)
def test_families_that_do_not_exist_yet(template: str, text: str, shape: Shape | None) -> None:
    derived = derive(template)
    assert derived is not None and detect_format(template).name == "derived"
    if shape is not None:
        assert derived.shape == shape
    check_all_splits("derived", "Let me see. " + text, "Let me see. ", PARIS, template=template)


def test_call_ids_the_template_writes_are_kept() -> None:
    template = NEXT + (
        "{% for c in m.tool_calls or [] %}[call {{ c.id }}] {{ c.function.name }}"
        " {{ c.function.arguments | tojson }} [/call]{% endfor %}<|end|>"
        "{% endfor %}"
    )
    derived = derive(template)
    assert derived is not None and isinstance(derived.shape, Shape)
    assert IDENT in derived.shape.call_open
    check_all_splits(
        "derived",
        '[call c9] get_time {"city": "Paris"} [/call]',
        "",
        [("get_time", {"city": "Paris"}, 0, "c9")],
        template=template,
    )


@pytest.mark.parametrize(
    "template",
    [
        "{% for m in messages %}{{ m.content }}{% endfor %}",  # writes no calls
        "{{ raise_exception('no') }}",
        "{% for m in messages %}{{ m.tool_calls | tojson }}{% endfor %}",  # bare JSON, no marker
        "",
    ],
)
def test_no_format_from_templates_that_teach_none(template: str) -> None:
    assert derive(template) is None
    assert detect_format(template).name == "generic"
    with pytest.raises(ValueError):
        format_named("derived", template)
