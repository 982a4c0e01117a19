"""Stored Responses and conversations in OpenAI's words: items with ids, lists, objects.

Pure converter, owned here; the database is :mod:`localllm.store.responses_db`
and the routes :mod:`localllm.server.routes_stored`.  A request's ``input``
is kept as items (:func:`input_items`: a string becomes one user message, each
item gets an id when it has none), so ``GET /v1/responses/{id}/input_items``
and a conversation's items answer in OpenAI's item shapes, and so that the
stored history, given back to :func:`~localllm.compat.responses.input.input_to_messages`
ahead of the next input, renders to the same messages as the first time (the
prompt's prefix, and so the engine's cached prefix, is the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict

from localllm.api.wire import JSONObject, JSONValue
from localllm.compat.frames import new_id
from localllm.compat.responses.input import check_items
from localllm.errors import InvalidRequest

_bad = InvalidRequest
# OpenAI's bounds: items added to a conversation at once, and a list page.
MAX_NEW_ITEMS = 20
MAX_PAGE, DEFAULT_PAGE = 100, 20
_PREFIX = {
    "message": "msg_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "reasoning": "rs_",
}


class ItemList(TypedDict):
    object: Literal["list"]
    data: list[JSONObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ConversationObject(TypedDict):
    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class Deleted(TypedDict):
    id: str
    object: str  # response | conversation.deleted
    deleted: bool


def _with_id(item: Mapping[str, JSONValue]) -> JSONObject:
    out = dict(item)
    kind = out.get("type")
    if kind is None and "role" in out:
        out["type"] = kind = "message"
    if not isinstance(out.get("id"), str):
        out["id"] = new_id(_PREFIX.get(str(kind), "item_"))
    if kind == "message":
        out.setdefault("status", "completed")
        if isinstance(out.get("content"), str):  # kept as parts, as OpenAI lists them
            part = "output_text" if out.get("role") == "assistant" else "input_text"
            out["content"] = [{"type": part, "text": out["content"]}]
    return out


def input_items(value: object) -> list[JSONObject]:
    """A request's ``input`` as the items it is kept as (checked by the converter)."""
    if isinstance(value, str):
        return [_with_id({"type": "message", "role": "user", "content": value})]
    if isinstance(value, list):
        return [_with_id(item) for item in value if isinstance(item, Mapping)]
    return []


def new_items(value: object, *, at_most: int = MAX_NEW_ITEMS) -> list[JSONObject]:
    """Items a client adds to a conversation: an array of valid input items."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad("items must be an array of input items")
    if len(value) > at_most:
        raise _bad(f"items: at most {at_most} items may be added at a time, got {len(value)}")
    check_items(value)
    return input_items(value)


def conversation_ref(value: object) -> str | None:
    """A request's ``conversation``: its id, or an object holding it."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise _bad("conversation must be a conversation id or {id}")
    return value


def page(items: Sequence[JSONObject], *, limit: object, order: object, after: object) -> ItemList:
    """One page of ``items`` (oldest first) in OpenAI's list shape; ``order`` defaults to
    ``desc`` (newest first) and ``after`` is the id the previous page ended with."""
    size = DEFAULT_PAGE if limit is None else _int(limit, "limit")
    if not 1 <= size <= MAX_PAGE:
        raise _bad(f"limit must be between 1 and {MAX_PAGE}")
    if order not in (None, "asc", "desc"):
        raise _bad('order must be "asc" or "desc"')
    ordered = list(items) if order == "asc" else list(items)[::-1]
    start = 0
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise _bad(f"after: no item {after!r} in this list")
        start = ids.index(after) + 1
    data = ordered[start : start + size]
    return {
        "object": "list",
        "data": data,
        "first_id": str(data[0]["id"]) if data else None,
        "last_id": str(data[-1]["id"]) if data else None,
        "has_more": start + size < len(ordered),
    }


def _int(value: object, name: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise _bad(f"{name} must be an integer") from None


def conversation_object(
    conv_id: str, created_at: int, metadata: dict[str, str]
) -> ConversationObject:
    return {"id": conv_id, "object": "conversation", "created_at": created_at, "metadata": metadata}


def deleted(obj_id: str, kind: str) -> Deleted:
    """What a delete answers: ``kind`` is ``response`` or ``conversation.deleted``."""
    return {"id": obj_id, "object": kind, "deleted": True}


def output_as_items(output: object) -> list[JSONObject]:
    """A response's output items, as the history that follows it holds them."""
    if not isinstance(output, list):
        return []
    return [dict(item) for item in output if isinstance(item, Mapping)]
