"""Prompt-lookup drafts (engine/ngram.py): what follows the latest earlier match."""

from __future__ import annotations

import pytest

from localllm.engine.ngram import NgramIndex


def index(tokens: list[int], **kw: int) -> NgramIndex:
    ix = NgramIndex(**kw)
    ix.extend(tokens)
    return ix


def test_continues_after_the_latest_earlier_occurrence() -> None:
    #            0  1  2  3  4  5  6  7  8  9
    ix = index([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 1, 2, 3])
    # "1 2 3" last occurred (before the suffix) at 6..8, followed by 7 1 2 3.
    assert ix.draft(3) == [7, 1, 2]
    # Past the end of the history the draft goes round the cycle again.
    assert ix.draft(10) == [7, 1, 2, 3, 7, 1, 2, 3, 7, 1]


def test_longest_match_wins_and_short_suffixes_fall_back() -> None:
    ix = index([5, 6, 7, 8, 0, 6, 7, 1, 0, 6, 7])
    assert ix.draft(2) == [1, 0]  # "0 6 7" (3 tokens) beats "6 7" followed by 8
    assert index([4, 4]).draft(3) == []  # min_n 2: a 2-token history has nothing earlier
    assert index([4, 4, 4], min_n=1).draft(3) == [4, 4, 4]


def test_no_match_no_draft_and_incremental_equals_batch() -> None:
    assert index([1, 2, 3, 4]).draft(4) == []
    assert index([1, 2, 1, 2]).draft(0) == []
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 1, 4, 1, 5]
    step = NgramIndex()
    for i, t in enumerate(tokens):
        step.extend([t])
        assert step.draft(4) == index(tokens[: i + 1]).draft(4)
    assert step.draft(4) == [9, 2, 6, 5]


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        NgramIndex(min_n=3, max_n=2)
