"""Tests for localllm.toolcalls.thinking: incremental <think> splitting at every boundary."""

from __future__ import annotations

import pytest

from localllm.toolcalls.thinking import (
    ThinkingSplitter,
    detect_thinking_tags,
    prompt_opens_thinking,
)


def run(pieces: list[str], **kw: object) -> tuple[str, str]:
    splitter = ThinkingSplitter(**kw)  # type: ignore[arg-type]
    thinking, content = "", ""
    for piece in pieces:
        t, c = splitter.feed(piece)
        thinking, content = thinking + t, content + c
    t, c = splitter.finish()
    return thinking + t, content + c


def splits(text: str) -> list[list[str]]:
    """The text whole, char by char, and cut in two at every position."""
    out = [[text], list(text)]
    out += [[text[:i], text[i:]] for i in range(1, len(text))]
    out += [
        [text[:i], text[i:j], text[j:]]
        for i in range(1, len(text), 3)
        for j in range(i + 1, len(text), 5)
    ]
    return out


CASES = [
    (
        "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
        {},
        ("Let me think.", "The answer is 4."),
    ),
    ("  <think>a < b</think>c </think> d", {}, ("a < b", "c </think> d")),
    ("No thinking here <think>x</think>", {}, ("", "No thinking here <think>x</think>")),
    ("\nHello", {}, ("", "\nHello")),
    ("<thinking>is not the tag", {}, ("", "<thinking>is not the tag")),
    ("Pre-opened reasoning\n</think>\nDone.", {"opened": True}, ("Pre-opened reasoning", "Done.")),
    ("\n\nstill thinking when cut off", {"opened": True}, ("still thinking when cut off", "")),
    ("<think>unterminated </thi", {}, ("unterminated </thi", "")),
    ("<thi", {}, ("", "<thi")),
    (
        "[THINK]step 1\nstep 2[/THINK]Result",
        {"open_tag": "[THINK]", "close_tag": "[/THINK]"},
        ("step 1\nstep 2", "Result"),
    ),
    ("<think></think>\n\nEmpty thought", {}, ("", "Empty thought")),
    ("", {}, ("", "")),
    ("</think>\n\nClosed a block the prompt opened", {}, ("", "Closed a block the prompt opened")),
    (
        "<|START_THINKING|>plan<|END_THINKING|>act",
        {"open_tag": "<|START_THINKING|>", "close_tag": "<|END_THINKING|>"},
        ("plan", "act"),
    ),
]


@pytest.mark.parametrize(("text", "kw", "expected"), CASES)
def test_every_split_gives_the_same_result(
    text: str, kw: dict[str, object], expected: tuple[str, str]
) -> None:
    for pieces in splits(text) if text else [[""]]:
        assert run(pieces, **kw) == expected, pieces


def test_no_partial_tag_is_emitted_early() -> None:
    s = ThinkingSplitter()
    assert s.feed("<thi") == ("", "")
    assert s.feed("nk>abc </") == ("abc", "")
    assert s.in_thinking
    assert s.feed("think>x") == ("", "x")
    assert not s.in_thinking


def test_prompt_opens_thinking() -> None:
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n")
    assert not prompt_opens_thinking("<think>\n\n</think>\n\n")  # thinking disabled by template
    assert not prompt_opens_thinking("user said <think> then more text")


def test_detect_tags() -> None:
    assert detect_thinking_tags("{{ '<think>\\n' }}...{{ '</think>' }}") == ("<think>", "</think>")
    assert detect_thinking_tags("[THINK]...[/THINK]") == ("[THINK]", "[/THINK]")
    assert detect_thinking_tags("{{ messages }}") is None


@pytest.mark.parametrize("pieces", splits("<|close|>think<|sep|>Answer."))
def test_an_empty_opened_block_is_closed_even_where_its_close_starts_like_a_call(
    pieces: list[str],
) -> None:
    # Kimi K3: "<|close|>" alone is call markup (an exit), the start of its close tag too.
    kw = {
        "open_tag": "<|open|>think<|sep|>",
        "close_tag": "<|close|>think<|sep|>",
        "opened": True,
        "exits": ("<|open|>", "<|close|>", "<|sep|>"),
    }
    assert run(pieces, **kw) == ("", "Answer.")
