"""Foreign text loses its terminal control sequences: the sanitizer, and the CLI's output paths.

The daemon-backed tests (``show`` of a model whose GGUF, template, system and
licence carry escapes; ``run`` of a script model that answers with them) are in
test_termsafe_e2e.py.
"""

from __future__ import annotations

import io
import itertools
import re
import time
from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st

from localllm.cli import termsafe
from localllm.cli.chatstream import StreamPrinter
from localllm.cli.output import PullProgress, table
from localllm.cli.termsafe import Sanitizer, clean

# What must never reach the terminal from foreign text: C0 but \t and \n, DEL, C1.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[2Jb", "ab"),  # CSI: clear the screen
        ("a\x1b[38;2;255;0;0mred\x1b[0m", "ared"),
        ("\x1b[?1049hpage\x1b[?1049l", "page"),  # alternate screen, private parameters
        ("a\x1b[1 qb", "ab"),  # CSI with an intermediate byte (cursor shape)
        ("a\x9b2Jb", "ab"),  # 8-bit CSI
        ("a\x1b]52;c;ZXZpbA==\x07b", "ab"),  # OSC 52 clipboard write, BEL-terminated
        ("a\x1b]52;c;ZXZpbA==\x1b\\b", "ab"),  # ... ST-terminated
        ("\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\", "click"),  # OSC 8 link
        ("a\x1b]0;title\x9cb", "ab"),  # OSC ended by the 8-bit ST
        ("a\x9d0;title\x07b", "ab"),  # 8-bit OSC
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),  # DCS (sixel)
        ("a\x1b_apc payload\x1b\\b", "ab"),  # APC
        ("a\x1b^pm\x1b\\b", "ab"),  # PM
        ("a\x1bXsos\x1b\\b", "ab"),  # SOS
        ("a\x90dcs\x9cb\x98sos\x9cc\x9epm\x9cd\x9fapc\x9ce", "abcde"),  # 8-bit string openers
        ("a\x1bcb", "ab"),  # RIS: reset the terminal
        ("a\x1b7b\x1b8c", "abc"),  # save and restore the cursor
        ("a\x1b(0lqk\x1b(Bb", "alqkb"),  # DEC line drawing selected, then ASCII again
        ("a\x1b#8b", "ab"),  # DECALN fills the screen with E
        ("a\x07b\x08c\x00d\x7fe\x0bf\x0cg\x1ch", "abcdefgh"),  # BEL, BS, NUL, DEL, VT, FF
        ("over\rwritten", "overwritten"),  # a lone CR would hide "over"
        ("line\r\nline\r\n", "line\nline\n"),  # CRLF reads as LF
        ("a\x85b\x84c", "abc"),  # NEL, IND: C1 controls that act alone
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("é 中文 😀 \u200d \u2028 ü", "é 中文 😀 \u200d \u2028 ü"),  # ordinary Unicode stays
        ("a\x1b[31\x18b", "ab"),  # CAN aborts a sequence; what follows is text
        ("a\x1b]0;t\x1ab", "ab"),  # so does SUB, in a string
        ("a\x1b[12éb", "aéb"),  # not a CSI character: the sequence is void, é is text
        ("a\x1béb", "aéb"),
        ("a\x1b]0;t\x1b[2Jb", "ab"),  # an ESC ends the string and starts its own sequence
        ("a\x1b[2\nJb", "ab"),  # a control inside a sequence is dropped, the sequence goes on
        ("a\x1b\x1b[2Jb", "ab"),
        ("unterminated\x1b]0;title", "unterminated"),
        ("unterminated\x1b[", "unterminated"),
    ],
)
def test_clean(text: str, shown: str) -> None:
    assert clean(text) == shown
    assert Sanitizer().feed(text) == shown


def test_clean_leaves_plain_text_as_it_is() -> None:
    text = "plain text\twith\ttabs\nand lines, ü and 😀"
    assert clean(text) is text


def test_a_sequence_split_at_any_point_is_still_removed() -> None:
    text = (
        "say \x1b]52;c;ZXZpbA==\x07hi\x1b[2J\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"
        "\x9b31mred\x1bPdcs\x1b\\ \x1b(0x\r\n"
    )
    whole = clean(text)
    assert whole == "say hilinkred x\n"
    for cut in range(len(text) + 1):
        s = Sanitizer()
        assert s.feed(text[:cut]) + s.feed(text[cut:]) == whole, cut
    s = Sanitizer()
    assert "".join(s.feed(ch) for ch in text) == whole


def test_an_unterminated_sequence_does_not_swallow_the_rest() -> None:
    """A stray OSC opener costs at most MAX_SEQUENCE characters, in one chunk or many."""
    tail = "y" * 100
    text = "a\x1b]0;" + "x" * 10_000 + tail
    whole = clean(text)
    assert whole.startswith("a") and whole.endswith(tail)
    assert len(whole) == len(text) - termsafe.MAX_SEQUENCE
    s = Sanitizer()
    assert "".join(s.feed(text[i : i + 7]) for i in range(0, len(text), 7)) == whole
    # A long CSI body too (all digits and semicolons): none of it is a control.
    assert not CONTROL.search(clean("\x1b[" + "1;" * 5000 + "m"))


_ALPHABET = "a é\n\t\r\x1b[]P_X^\\\x07\x9b\x9c\x9d\x90\x18\x1a\x00(0;m?2"


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=_ALPHABET, max_size=60),
    st.lists(st.integers(min_value=0, max_value=60), max_size=6),
)
def test_any_chunking_gives_the_same_text_and_no_controls(text: str, cuts: list[int]) -> None:
    with mock.patch.object(termsafe, "MAX_SEQUENCE", 8):  # the cap, reached often
        whole = clean(text)
        s = Sanitizer()
        bounds = [0, *sorted(c for c in cuts if c <= len(text)), len(text)]
        chunked = "".join(s.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    assert chunked == whole
    assert not CONTROL.search(whole)
    it = iter(text)
    assert all(ch in it for ch in whole)  # characters are only ever taken out


@pytest.mark.parametrize(
    "hostile",
    [
        "\x1b[" * 250_000,
        "\x1b]" * 250_000,
        "\x00" * 500_000,
        "\x1b[" + "1;" * 250_000,
        "\x1b]" + "x" * 500_000,
        "\x1b]" + ("x" * 5_000 + "\x9d") * 100,  # a capped string, reopened: not quadratic
        ("\x1b" + "é") * 250_000,
        "a\x1b" * 250_000,
    ],
)
def test_hostile_input_is_linear(hostile: str) -> None:
    start = time.process_time()
    out = clean(hostile)
    took = time.process_time() - start
    assert not CONTROL.search(out)
    assert took < 2.0, took  # measured 0.001-0.45 s on 0.5-1 M characters


# -- the output paths -------------------------------------------------------------------
def test_stream_printer_strips_the_model_text_and_keeps_its_own_colour() -> None:
    out = io.StringIO()
    printer = StreamPrinter(out, color=True, wordwrap=False)
    for thinking, content in [
        ("hm\x1b]52;c;ZX", ""),
        ("Zpbα==\x07m", ""),  # the OSC ends in the next chunk: its payload stays hidden
        ("", "ans\x1b["),
        ("", "2Jwer\r\n"),
    ]:
        printer.feed({"role": "assistant", "content": content, "thinking": thinking})
    printer.finish()
    assert out.getvalue() == "\x1b[2mThinking...\nhmm\n...done thinking.\x1b[0m\n\nanswer\n"


def test_table_cells_are_text() -> None:
    text = table(["NAME", "ID"], [("evil\x1b[2J:latest", "0123"), ("b", "4\x1b]0;t\x07567")])
    assert text.splitlines() == [
        "NAME           ID",
        "evil:latest    0123",
        "b              4567",
    ]


def test_pull_progress_status_is_text() -> None:
    out = io.StringIO()
    progress = PullProgress(out, interactive=False)
    progress.update({"status": "using Q4_K_M: m\x1b]0;pwned\x07.gguf\x1b[2J"})
    assert out.getvalue() == "using Q4_K_M: m.gguf\n"
    tty = io.StringIO()
    progress = PullProgress(tty, interactive=True)
    progress.update({"status": "pulling \x1b[3Bhere"})
    progress.finish()
    assert "pulling here\n" in tty.getvalue()
    assert "\x1b[2K" in tty.getvalue()  # our own line clearing stays
    assert "\x1b[3B" not in tty.getvalue()


def test_search_results_are_text() -> None:
    from localllm.cli.search import render

    text = render(
        {  # type: ignore[typeddict-item]
            "name": "hf.co/evil/\x1b]8;;http://x\x1b\\Model-GGUF\x1b]8;;\x1b\\",
            "catalog": ["evil\x1b[2J"],
            "downloads": 5,
            "capabilities": ["completion\x07"],
            "quants": [{"tag": "Q4\x1b[1A_K_M", "size": 10, "fit": {"summary": "fits\x9b2J"}}],
        }
    )
    assert not CONTROL.search(text)
    assert text.splitlines()[0] == "hf.co/evil/Model-GGUF  evil"
    error = render({"name": "x", "error": "HTTP 500: \x1b]52;c;ZXZpbA==\x07oops"})  # type: ignore[typeddict-item]
    assert error.splitlines()[-1] == "  (files not listed: HTTP 500: oops)"


def test_show_render_is_text() -> None:
    from localllm.cli.show import render

    info = {
        "details": {"family": "llama", "quantization_level": "Q4\x1b[2J"},
        "model_info": {"general.architecture": "llama", "general.name": "n\x1b]0;t\x07ame"},
        "template": "{{ .Prompt }}\x1b]52;c;ZXZpbA==\x07",
        "license": "MIT\r\x1b[2K\x1b[1Aevil",
        "system": "be \x1b[8mhidden\x1b[0m nice",
        "parameters": 'stop "\x1b[2J"',
        "capabilities": ["completion"],
    }
    text = render(info, verbose=True)
    assert not CONTROL.search(text)
    assert re.search(r"general\.name\s+name", text), text
    assert "MITevil" in text and "be hidden nice" in text


def test_error_messages_are_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from localllm.cli import cp, main
    from localllm.errors import NotFound

    def fail(args: object) -> int:
        raise NotFound("model 'x' not found: the Hub said \x1b]0;pwned\x07\x1b[2Jno")

    monkeypatch.setattr(cp, "run", fail)
    assert main.main(["cp", "a", "b"]) == 1
    assert capsys.readouterr().err == "Error: model 'x' not found: the Hub said no\n"


def test_repl_show_prints_the_model_text_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    from localllm.cli.repl import Repl
    from localllm.cli.session import Session

    info = {
        "template": "{{ .Prompt }}\x1b]52;c;ZXZpbA==\x07",
        "license": "MIT\x1b[2J",
        "modelfile": "FROM x\x1bc",
        "system": "be \x1b[8mhidden\x1b[0m nice",
        "parameters": 'stop "\x1b[2J<|end|>"',
    }

    class _Client:
        def show(self, model: str) -> dict[str, str]:
            return info

    repl = Repl(_Client(), Session("m"), tty=False)  # type: ignore[arg-type]
    for what in ("template", "license", "modelfile", "system", "parameters"):
        repl.command(f"/show {what}")
    out = capsys.readouterr().out
    assert not CONTROL.search(out), repr(out)
    assert "{{ .Prompt }}\nMIT\nFROM x\nbe hidden nice\n" in out
    assert 'stop "<|end|>"' in out
