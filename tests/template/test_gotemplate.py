"""Go text/template interpreter: semantics, limits, and golden agreement with the Jinja path.

``tests/data/templates/<family>.gotmpl`` holds the Go template a published
Ollama model of that family carries, ``<family>.jinja`` the Hugging Face chat
template of the same family.  For the same conversation both must give the
same prompt (after the BOS the tokenizer adds anyway is stripped).  Template
files end with one newline that is not part of the template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localllm.template.chat import render_chat, strip_leading_bos
from localllm.template.gofuncs import go_json, go_sprintf
from localllm.template.goparse import GoTemplateError
from localllm.template.goprompt import render_go
from localllm.template.gotemplate import GoTemplate, render
from localllm.template.select import is_jinja, render_prompt

DATA = Path(__file__).resolve().parents[1] / "data" / "templates"


def load(name: str) -> str:
    text = (DATA / name).read_text()
    return text[:-1] if text.endswith("\n") else text


SYS = {"role": "system", "content": "You are a pirate."}
U1 = {"role": "user", "content": "Hello there"}
A1 = {"role": "assistant", "content": "Arr, ahoy!"}
U2 = {"role": "user", "content": "Where is the treasure?"}
WITH_SYSTEM = [[SYS, U1], [SYS, U1, A1, U2]]
WITHOUT_SYSTEM = [[U1], [U1, A1, U2]]
FAMILIES = {
    # family: (bos token, conversations)
    "chatml": ("", WITH_SYSTEM + WITHOUT_SYSTEM),
    "llama3": ("<|begin_of_text|>", WITH_SYSTEM + WITHOUT_SYSTEM),
    "qwen2.5": ("", WITH_SYSTEM),  # its Jinja invents a system prompt; Ollama's SYSTEM does
    "mistral": ("<s>", WITH_SYSTEM + WITHOUT_SYSTEM),
    "gemma": ("<bos>", WITHOUT_SYSTEM),  # Gemma has no system role
    "phi3": ("", WITH_SYSTEM + WITHOUT_SYSTEM),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_go_and_jinja_templates_agree(family: str) -> None:
    bos, conversations = FAMILIES[family]
    go_src, jinja_src = load(f"{family}.gotmpl"), load(f"{family}.jinja")
    assert not is_jinja(go_src) and is_jinja(jinja_src)
    for messages in conversations:
        go = render_go(go_src, messages)
        jinja = strip_leading_bos(
            render_chat(jinja_src, messages, bos_token=bos, eos_token="</s>"), bos
        )
        assert go == jinja, f"{family}: {messages}"
        assert messages[-1]["content"] in go


def test_llama3_exact_prompt() -> None:
    out = render_go(load("llama3.gotmpl"), [SYS, U1])
    assert out == (
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a pirate.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string", "description": "City <name>"}},
            },
        },
    }
]


def test_qwen_tools_and_tool_calls() -> None:
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    result = {"role": "tool", "content": "18C"}
    out = render_go(load("qwen2.5.gotmpl"), [SYS, U1, call, result], tools=TOOLS)
    fn = (
        '{"name":"get_weather","description":"Weather in a city","parameters":{"type":'
        '"object","required":["city"],"properties":{"city":{"type":"string",'
        '"description":"City \\u003cname\\u003e"}}}}'
    )
    assert f'{{"type": "function", "function": {fn}}}' in out
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>'
        "<|im_end|>\n" in out
    )
    assert out.endswith("<tool_response>\n18C\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_legacy_template_renders_each_turn_and_cuts_after_response() -> None:
    src = load("llama2-legacy.gotmpl")
    out = render_go(src, [SYS, U1, A1, U2])
    assert out == (
        "[INST] <<SYS>>You are a pirate.<</SYS>>\n\nHello there [/INST] Arr, ahoy!</s>"
        "[INST] <<SYS>><</SYS>>\n\nWhere is the treasure? [/INST] "
    )


def test_consecutive_messages_are_merged_and_systems_joined() -> None:
    src = "{{ .System }}|{{ range .Messages }}{{ .Role }}={{ .Content }};{{ end }}"
    msgs = [SYS, {"role": "system", "content": "Be brief."}, U1, U2]
    assert render_go(src, msgs) == (
        "You are a pirate.\n\nBe brief.|system=You are a pirate."
        "\n\nBe brief.;user=Hello there\n\nWhere is the treasure?;"
    )


@pytest.mark.parametrize(
    ("src", "data", "want"),
    [
        ("{{ .A }}-{{ .B.C }}", {"A": 1, "B": {"C": "x"}}, "1-x"),
        ("{{ .Nope }}", {}, "<no value>"),
        ("a  {{- 1 -}}  b", {}, "a1b"),
        ("{{ if and .A .B }}y{{ else if .A }}a{{ else }}n{{ end }}", {"A": 1, "B": 0}, "a"),
        ("{{ with .X }}{{ . }}{{ else }}none{{ end }}", {"X": ""}, "none"),
        (
            "{{ range $k, $v := .M }}{{ $k }}={{ $v }},{{ end }}",
            {"M": {"b": 2, "a": 1}},
            "a=1,b=2,",
        ),
        (
            "{{ range .L }}{{ if eq . 2 }}{{ continue }}{{ end }}"
            "{{ if eq . 4 }}{{ break }}{{ end }}{{ . }}{{ end }}",
            {"L": [1, 2, 3, 4, 5]},
            "13",
        ),
        ("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}", {}, "2"),
        ('{{ .A | len | printf "%03d" }}', {"A": "abcd"}, "004"),
        ("{{ index .L 1 }} {{ slice .L 1 3 }} {{ len .L }}", {"L": [1, 2, 3]}, "2 [2 3] 3"),
        ('{{ print 1 2 "a" 3 }}|{{ println "x" 1 }}', {}, "1 2a3|x 1\n"),
        (
            "{{ json .V }}",
            {"V": {"z": 1.0, "a": [True, None, "<&>"]}},
            '{"a":[true,null,"\\u003c\\u0026\\u003e"],"z":1}',
        ),
        (
            '{{ not .E }} {{ ne 1 2 }} {{ lt 1 2 }} {{ gt "b" "a" }} {{ eq 1 3 1 }}',
            {"E": []},
            "true true true true true",
        ),
        ("{{/* a comment */}}x{{- /* trimmed */ -}} y", {}, "xy"),
        ("{{ (index .L 0).Name }}", {"L": [{"Name": "n"}]}, "n"),
        ('{{ `raw\\n` }}{{ "esc\\n" }}', {}, "raw\\nesc\n"),
        ("{{ range 3 }}{{ . }}{{ end }}", {}, "012"),
        ("{{ $.A }}{{ range .L }}{{ $.A }}{{ end }}", {"A": "a", "L": [1, 2]}, "aaa"),
        ("{{ 1.5 }} {{ 2.0 }} {{ 1e21 }}", {}, "1.5 2 1e+21"),
    ],
)
def test_semantics(src: str, data: Any, want: str) -> None:
    assert render(src, data) == want


def test_current_date_is_iso() -> None:
    out = render("{{ currentDate }}", {})
    assert len(out) == 10 and out[4] == "-" and out[7] == "-"


@pytest.mark.parametrize(
    ("src", "words"),
    [
        ("{{ range 100000000 }}x{{ end }}", "step limit"),
        (
            "{{ range $.L }}{{ range $.L }}{{ range $.L }}{{ range $.L }}x"
            "{{ end }}{{ end }}{{ end }}{{ end }}",
            "step limit",
        ),
        ('{{ $x := "aaaaaaaa" }}{{ range 60 }}{{ $x = printf "%s%s" $x $x }}{{ end }}', "exceeds"),
        ("{{ range 10000 }}" + "x" * 1000 + "{{ end }}", "output exceeds"),
        ('{{ printf "%0999999999d" 1 }}', "width"),
        ("{{ if 1 }}" * 100 + "{{ end }}" * 100, "nests deeper"),
        ("{{ " + "(" * 100 + "1" + ")" * 100 + " }}", "nests deeper"),
        ('{{ define "x" }}{{ template "x" }}{{ end }}', "not supported"),
        ('{{ template "x" . }}', "not supported"),
        ("{{ call .F }}", 'function "call" not defined'),
        ("{{ if .A }}", "has no {{end}}"),
        ("{{ end }}", "unexpected {{end}}"),
        ("{{ .A", "unclosed action"),
        ("{{ break }}", "outside {{range}}"),
        ("{{ $u }}", "undefined variable"),
        ('{{ eq 1 "a" }}', "incompatible types"),
    ],
)
def test_hostile_or_broken_templates_fail_clearly(src: str, words: str) -> None:
    with pytest.raises(GoTemplateError) as info:
        render(src, {"L": list(range(100))})
    assert words in info.value.message
    assert info.value.status == 400


def test_struct_fields_are_checked() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    assert (
        render_go("{{ range .Messages }}{{ .Role }}:{{ .ToolCalls }}{{ end }}", msgs) == "user:[]"
    )
    with pytest.raises(GoTemplateError, match="can't evaluate field Nope"):
        render_go("{{ range .Messages }}{{ .Nope }}{{ end }}", msgs)


def test_select_prefers_the_layer_template_and_detects_syntax() -> None:
    msgs = [U1]
    go = "{{ range .Messages }}<{{ .Content }}>{{ end }}"
    jinja = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    assert render_prompt(go, jinja, msgs) == "<Hello there>"
    assert render_prompt(jinja, None, msgs) == "[Hello there]"  # Jinja pasted into TEMPLATE
    assert render_prompt(None, jinja, msgs) == "[Hello there]"
    assert render_prompt("  ", jinja, msgs) == "[Hello there]"
    assert render_prompt(None, None, msgs) == "Hello there"  # no template: the text alone


def test_printf_and_json_helpers() -> None:
    assert (
        go_sprintf("%5.1f|%-3d|%x|%v|%%|%q", 3.14159, 7, 255, [1, "a"], "q")
        == '  3.1|7  |ff|[1 a]|%|"q"'
    )
    assert go_sprintf("%d") == "%!d(MISSING)"
    assert go_json([1.5, 1e-7, 2**53]) == "[1.5,1e-07,9007199254740992]"
    assert json.loads(go_json({"b": {"c": [1]}, "a": "é"})) == {"a": "é", "b": {"c": [1]}}


def test_parse_once_execute_many() -> None:
    tpl = GoTemplate("{{ .X }}")
    assert [tpl.execute({"X": i}) for i in range(3)] == ["0", "1", "2"]
