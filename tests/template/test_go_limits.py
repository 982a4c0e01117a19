"""Hostile Go templates: linear lexing and parsing, and a render budget nothing slips past.

Sizes are the issue's reproductions scaled down so each check takes well under
a second here and seconds (or a failure) on the quadratic code it replaced:
a 512 KiB template of actions or comments took 3-6 s to lex, 20 000 variables
took seconds to look up, and a run of same-role messages was merged by copying
the growing text once per message.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from localllm.template.gofuncs import FUNC_NAMES
from localllm.template.goparse import MAX_TEMPLATE_CHARS, GoTemplateError, parse
from localllm.template.goprompt import collate, render_go
from localllm.template.gotemplate import MAX_OUTPUT_CHARS, GoTemplate, render

SIZE = MAX_TEMPLATE_CHARS  # 256 KiB: the old lexer took 1.3-1.4 s over it
SHAPES = {
    "actions": "a\n{{ .A }}",
    "comments": "{{/* note */}}\n",
    "trimmed": "x {{- .A -}} \n",
    "branches": "{{ if .A }}x{{ else }}y{{ end }}\n",
    "variables": "{{ $x := .A }}{{ $x }}\n",
    "strings": '{{ print "a\\"b" `raw` \'c\' 0x1F 1.5e3 }}\n',
}


def timed(fn: Callable[[], Any]) -> float:
    """CPU seconds of this thread: the parser's own work, whatever else the machine runs
    (wall time read 0.74 s under the full suite's three workers on two cores)."""
    start = time.thread_time()
    fn()
    return time.thread_time() - start


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_template_at_the_size_cap_parses_fast(shape: str) -> None:
    unit = SHAPES[shape]
    src = unit * (SIZE // len(unit))
    assert timed(lambda: parse(src, FUNC_NAMES)) < 0.6


def test_line_numbers_are_still_counted_right() -> None:
    src = "x\n" * 5000 + "{{ .A }}\n{{/* c\n\n */}}" + "y\n" * 7 + "{{ nope }}"
    with pytest.raises(GoTemplateError, match=r"line 5011: function \"nope\" not defined"):
        parse(src, FUNC_NAMES)


def test_template_size_cap_names_the_limit() -> None:
    with pytest.raises(GoTemplateError, match=f"over {MAX_TEMPLATE_CHARS} characters"):
        parse("x" * (MAX_TEMPLATE_CHARS + 1), FUNC_NAMES)


@pytest.mark.parametrize(
    ("src", "words"),
    [
        ('{{ printf "%' + "9" * 5000 + 'd" 1 }}', "width or precision over"),
        ('{{ printf "%.' + "9" * 5000 + 'f" 1.5 }}', "width or precision over"),
        ("{{ 0x" + "f" * 5000 + " }}", "bad number"),
        ("{{ " + "9" * 5000 + " }}", "bad number"),
        ("{{ 1e999 }}", "out of range"),
    ],
    ids=["width", "precision", "hex", "decimal", "float"],
)
def test_huge_numbers_are_a_400_not_a_crash(src: str, words: str) -> None:
    with pytest.raises(GoTemplateError, match=words) as info:
        render(src, {})
    assert info.value.status == 400


def test_numbers_that_fit_still_print() -> None:
    assert (
        render("{{ 18446744073709551615 }} {{ -9223372036854775808 }} {{ 0x7f }} {{ 1e20 }}", {})
        == "18446744073709551615 -9223372036854775808 127 100000000000000000000"
    )


# -- nothing builds a string past the limit, even for a moment --------------------------------

BIG = '{{ $x := printf "%9999s" "" }}{{ $y := print ' + "$x " * 400 + "}}"  # $y: ~4 MB


@pytest.mark.parametrize(
    "src",
    [
        BIG + "{{ $z := print " + "$y " * 25 + "}}",
        BIG + "{{ $z := println " + "$y " * 25 + "}}",
        BIG + '{{ $z := printf "' + "%v" * 25 + '" ' + "$y " * 25 + "}}",
        '{{ printf "' + "%9999v" * 5000 + '" ' + "1 " * 5000 + "}}",
        BIG + '{{ printf "%s" 1 ' + "$y " * 25 + "}}",  # the EXTRA arguments
    ],
    ids=["print", "println", "printf", "widths", "extra"],
)
def test_string_builders_stop_at_the_limit(src: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(GoTemplateError, match=f"exceeds {MAX_OUTPUT_CHARS} characters"):
            render(src, {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 << 20  # the old code joined 50-100 MB before it looked at the size


def test_printing_big_data_stops_at_the_output_left() -> None:
    # 50 MB of request data printed whole, then refused, was the old order.
    text = "0123456789" * 1000
    data = {"L": [text] * 5000, "M": {f"k{i}": text for i in range(5000)}}
    for src in ("{{ .L }}", "{{ json .L }}", "{{ .M }}", "{{ json .M }}", "ab{{ .L }}"):
        tracemalloc.start()
        try:
            with pytest.raises(GoTemplateError, match="exceeds"):
                render(src, data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20, src


# -- the deadline holds between cheap steps and after expensive calls --------------------------


@pytest.mark.parametrize(
    "body",
    [
        "{{ $w := json $.L }}",
        "{{ $w := print $.L }}",
        '{{ $w := printf "%v" $.L }}',
        "{{ $w := len (json $.L) }}",
    ],
    ids=["json", "print", "printf", "len"],
)
def test_expensive_calls_cannot_outrun_the_deadline(body: str) -> None:
    # Each call takes milliseconds; the clock used to be read only every 1024 steps.
    tpl = GoTemplate("{{ range 1000000 }}" + body + "{{ end }}")
    start = time.perf_counter()
    with pytest.raises(GoTemplateError, match="too long to render"):
        tpl.execute({"L": list(range(100_000))}, seconds=0.2)
    assert time.perf_counter() - start < 1.0


def test_many_variables_are_found_in_constant_time() -> None:
    # 9,000 of them fit the size cap: ~0.05 s; a scan of the scope per lookup took ~0.6 s.
    n = 9_000
    src = "".join(f"{{{{$v{i}:={i}}}}}" for i in range(n)) + "{{$}}" * n + "{{$v0}}" * n
    tpl = GoTemplate(src)
    start = time.perf_counter()
    out = tpl.execute({"A": 1})
    assert time.perf_counter() - start < 0.3
    assert out == "map[A:1]" * n + "0" * n


def test_shadowed_and_scoped_variables_still_resolve() -> None:
    src = (
        "{{ $x := 1 }}{{ range $i, $x := .L }}{{ $x }}{{ $x = 9 }}{{ $x }}{{ end }}{{ $x }}"
        "{{ with .A }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}{{ $x = 3 }}{{ $x }}"
    )
    assert render(src, {"L": [5, 6], "A": 1}) == "5969121 3".replace(" ", "")


# -- one budget per chat render ------------------------------------------------------------------


def turns(n: int, prompt: str) -> list[dict[str, Any]]:
    return [
        m
        for _ in range(n)
        for m in ({"role": "user", "content": prompt}, {"role": "assistant", "content": "a"})
    ]


def test_legacy_turns_share_the_step_budget() -> None:
    src = "{{ range 300000 }}{{ end }}{{ .Prompt }}{{ .Response }}"
    start = time.perf_counter()
    with pytest.raises(GoTemplateError, match="step limit"):
        render_go(src, turns(20, "q"))  # 6M steps: each turn alone was within 1M
    assert time.perf_counter() - start < 2.0


def test_legacy_turns_share_the_output_budget() -> None:
    with pytest.raises(GoTemplateError, match=f"output exceeds {MAX_OUTPUT_CHARS}"):
        render_go(
            "{{ .Prompt }}{{ .Prompt }}{{ .Prompt }}{{ .Response }}", turns(3, "q" * 1_000_000)
        )  # 3 MB a turn, 9 MB in all


def test_merging_a_long_run_of_messages_is_linear() -> None:
    messages = [{"role": "user", "content": f"{i:05d}" + "x" * 95} for i in range(20_000)]
    start = time.perf_counter()
    system, merged = collate(messages)
    assert time.perf_counter() - start < 0.5
    assert system == "" and len(merged) == 1
    assert merged[0]["content"] == "\n\n".join(m["content"] for m in messages)
    assert messages[0]["content"].startswith("00000") and len(messages[0]["content"]) == 100
