"""Reading a JSON value or a Python list again from where the last read stopped
(``jsonscan.JsonScan``) finds the same end as reading it from the start, at every cut."""

from __future__ import annotations

import json
import time

import pytest

from localllm.toolcalls import format_named
from localllm.toolcalls.jsonscan import JsonScan, json_end
from localllm.toolcalls.pythonic import list_end
from tests.support.toolcall_helpers import TOOLS

TEXTS = [
    '{"a": [1, {"b": "x}]\\"{"}], "c": "\\\\"} tail',
    '[{"name": "f", "arguments": {"s": "\\u00e9\\\\\\"]"}}, {"x": []}]',
    '{"deep": [[[[{"k": "]]]]"}]]]]}',
]
PYTHON = ["[f(a='x]\\')', b=\"y)\\\"\"), g(c={'d': [1, 2]})] after", "[h(s='''x''')]"]


@pytest.mark.parametrize("text", TEXTS)
def test_json_from_where_it_stopped(text: str) -> None:
    whole = json_end(text, 0)
    assert whole is not None and json.loads(text[:whole]) is not None
    for step in (1, 2, 3, 7):
        scan = JsonScan()
        got = None
        for cut in range(step, len(text) + step, step):
            got = json_end(text[:cut], 0, scan)
            if got is not None:
                break
        assert got == whole, step


@pytest.mark.parametrize("text", PYTHON)
def test_python_lists_from_where_they_stopped(text: str) -> None:
    whole = list_end(text, 0)
    assert whole is not None
    for step in (1, 2, 5):
        scan = JsonScan()
        got = None
        for cut in range(step, len(text) + step, step):
            got = list_end(text[:cut], 0, scan)
            if got is not None:
                break
        assert got == whole


def test_a_changed_text_is_read_from_its_start() -> None:
    scan = JsonScan()
    assert json_end('{"a": "b', 0, scan) is None
    assert json_end('{"z": 1}', 0, scan) == 8  # not the text scanned before


@pytest.mark.parametrize("fmt", ["hermes", "lfm2", "mistral", "kimi_k2", "nemotron_v2"])
def test_a_long_call_costs_little_per_piece(fmt: str) -> None:
    code = "def f(x):\n    return {'a': [x, \"]\"]}\n" * 2000  # 70 KB of arguments
    args = json.dumps({"code": code})
    text = {
        "hermes": f'<tool_call>{{"name": "python", "arguments": {args}}}</tool_call>',
        "lfm2": f"<|tool_call_start|>[python(code={json.dumps(code)})]<|tool_call_end|>",
        "mistral": f"[TOOL_CALLS]python[ARGS]{args}",
        "kimi_k2": (
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.python:0"
            f"<|tool_call_argument_begin|>{args}<|tool_call_end|>"
            "<|tool_calls_section_end|>"
        ),
        "nemotron_v2": f'<TOOLCALL>[{{"name": "python", "arguments": {args}}}]</TOOLCALL>',
    }[fmt]
    parser = format_named(fmt).parser(TOOLS, None)
    start = time.process_time()
    calls = []
    for i in range(0, len(text), 4):
        calls += parser.feed(text[i : i + 4]).calls
    calls += parser.finish().calls
    # Read whole at each piece, this took over a minute; read on, well under a second.
    assert time.process_time() - start < 5
    assert [(c.name, c.arguments) for c in calls] == [("python", {"code": code})]
