"""The stored items' shapes: ids given, string content kept as parts, list pages, and a
history that renders to the very messages its first request did."""

from __future__ import annotations

from typing import Any

import pytest

from localllm.compat.responses.input import input_to_messages
from localllm.compat.responses.stored import (
    conversation_ref,
    input_items,
    new_items,
    output_as_items,
    page,
)
from localllm.errors import InvalidRequest


def test_input_items_get_ids_and_parts() -> None:
    (one,) = input_items("hi")
    assert one["type"] == "message" and one["role"] == "user"
    assert str(one["id"]).startswith("msg_") and one["status"] == "completed"
    assert one["content"] == [{"type": "input_text", "text": "hi"}]
    items = input_items(
        [
            {"role": "assistant", "content": "ok"},
            {"type": "function_call", "name": "f", "call_id": "c1", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "3", "id": "mine"},
        ]
    )
    assert items[0]["content"] == [{"type": "output_text", "text": "ok"}]
    assert str(items[1]["id"]).startswith("fc_") and items[2]["id"] == "mine"


def test_a_stored_history_renders_as_it_was_sent() -> None:
    sent: Any = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "input_text", "text": "more"}]},
    ]
    output: Any = [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "yes", "annotations": [], "logprobs": []}]},
    ]  # fmt: skip
    history = input_items(sent) + output_as_items(output)
    direct = input_to_messages([*sent, *output, {"role": "user", "content": "next"}])
    assert input_to_messages("next", None, history) == direct
    assert direct[3] == {"role": "assistant", "content": "yes", "thinking": "t"}


def test_pages() -> None:
    items: Any = [{"id": f"i{n}"} for n in range(5)]
    first = page(items, limit="2", order="asc", after=None)
    assert [i["id"] for i in first["data"]] == ["i0", "i1"] and first["has_more"]
    assert first["first_id"] == "i0" and first["last_id"] == "i1"
    last = page(items, limit=2, order="asc", after="i3")
    assert [i["id"] for i in last["data"]] == ["i4"] and not last["has_more"]
    newest = page(items, limit=None, order=None, after=None)
    assert [i["id"] for i in newest["data"]] == ["i4", "i3", "i2", "i1", "i0"]
    empty = page([], limit=None, order=None, after=None)
    assert empty["data"] == [] and empty["first_id"] is None and not empty["has_more"]
    for bad in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"order": "up"}, {"after": "no"}):
        with pytest.raises(InvalidRequest):
            page(items, **{"limit": None, "order": None, "after": None, **bad})


def test_new_items_and_conversation_refs_are_checked() -> None:
    assert new_items(None) == []
    with pytest.raises(InvalidRequest, match="at most 20"):
        new_items([{"role": "user", "content": "x"}] * 21)
    with pytest.raises(InvalidRequest, match="not supported"):
        new_items([{"type": "mystery"}])
    with pytest.raises(InvalidRequest, match="array"):
        new_items("hi")
    assert conversation_ref("conv_1") == conversation_ref({"id": "conv_1"}) == "conv_1"
    assert conversation_ref(None) is None
    for bad in ("", 5, {"name": "x"}):
        with pytest.raises(InvalidRequest):
            conversation_ref(bad)
