"""Functionary v3.2: ``>>>recipient`` messages (the prompt ends with ``>>>``)."""

from __future__ import annotations

from tests.support.toolcall_helpers import check_all_splits
from tests.support.toolcall_samples import FUNCTIONARY_CALLS


def test_text_to_all() -> None:
    check_all_splits(
        "functionary_v3_2", "all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []
    )
    check_all_splits("functionary_v3_2", "all\nHello", "Hello", [], tools=None)


def test_call_first_and_after_text() -> None:
    check_all_splits(
        "functionary_v3_2",
        'special_function\n{"arg1": 1}',
        "",
        [("special_function", {"arg1": 1}, 0, None)],
    )
    check_all_splits(
        "functionary_v3_2",
        FUNCTIONARY_CALLS,
        "Let me check.",
        [("get_time", {"city": "Paris"}, 0, None), ("python", {"code": "print(1)"}, 1, None)],
    )


def test_unknown_recipient_is_content() -> None:
    check_all_splits("functionary_v3_2", 'nope\n{"a": 1}', 'nope\n{"a": 1}', [])
    check_all_splits("functionary_v3_2", "Hi there", "Hi there", [])
