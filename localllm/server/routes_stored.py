"""Stored Responses and the Conversations API: read, list, add to and delete them.

Routes only: ``GET``/``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items``, and ``/v1/conversations`` with its
items, as OpenAI serves them.  The database is
:mod:`localllm.store.responses_db` (every call in a worker thread), the shapes
:mod:`localllm.compat.responses.stored`; what ``POST /v1/responses`` stores is
:mod:`localllm.server.stored`'s.  Unknown (or expired) ids are a 404 in
OpenAI's error shape; list pages take ``limit`` (1-100, default 20), ``order``
(``desc`` by default) and ``after``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import RootModel

from localllm.api.wire import JSONObject
from localllm.compat.frames import new_id
from localllm.compat.responses.request import check_metadata
from localllm.compat.responses.stored import (
    ItemList,
    conversation_object,
    deleted,
    new_items,
    page,
)
from localllm.errors import InvalidRequest, NotFound
from localllm.server.deps import offload, parse_json
from localllm.server.jsonout import json_response
from localllm.server.stored import conversation_not_found, response_not_found, responses_db
from localllm.store.responses_db import ResponsesDB

router = APIRouter()
_Body = RootModel[dict[str, object]]


def _page(request: Request, items: list[JSONObject]) -> ItemList:
    q = request.query_params
    return page(items, limit=q.get("limit"), order=q.get("order"), after=q.get("after"))


async def _body(request: Request) -> dict[str, object]:
    """The JSON object sent; an empty body is an empty object (nothing to set)."""
    if not await request.body():
        return {}
    return (await parse_json(request, _Body)).root


# -- responses ------------------------------------------------------------------------


@router.get("/v1/responses/{response_id}")
async def get_response(request: Request, response_id: str) -> Response:
    stored = await offload(request, responses_db(request).response, response_id)
    if stored is None:
        raise response_not_found(response_id)
    return await json_response(request, stored.response)


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> Response:
    if not await offload(request, responses_db(request).delete_response, response_id):
        raise response_not_found(response_id)
    return await json_response(request, deleted(response_id, "response"))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str) -> Response:
    stored = await offload(request, responses_db(request).response, response_id)
    if stored is None:
        raise response_not_found(response_id)
    return await json_response(request, _page(request, stored.input))


# -- conversations --------------------------------------------------------------------


def _known(db: ResponsesDB, conv_id: str) -> None:
    if db.conversation(conv_id) is None:
        raise conversation_not_found(conv_id)


async def _conversation(request: Request, conv_id: str) -> Response:
    found = await offload(request, responses_db(request).conversation, conv_id)
    if found is None:
        raise conversation_not_found(conv_id)
    return await json_response(
        request, conversation_object(found.id, found.created_at, found.metadata)
    )


@router.post("/v1/conversations")
async def create_conversation(request: Request) -> Response:
    body = await _body(request)
    metadata = check_metadata(body.get("metadata"))
    items = new_items(body.get("items"))
    db = responses_db(request)
    await offload(request, db.check_room)
    made = await offload(request, db.create_conversation, new_id("conv_"), metadata, items)
    return await json_response(request, conversation_object(made.id, made.created_at, metadata))


@router.get("/v1/conversations/{conv_id}")
async def get_conversation(request: Request, conv_id: str) -> Response:
    return await _conversation(request, conv_id)


@router.post("/v1/conversations/{conv_id}")
async def update_conversation(request: Request, conv_id: str) -> Response:
    body = await _body(request)
    if "metadata" not in body:
        raise InvalidRequest("metadata is required: the only thing a conversation update sets")
    metadata = check_metadata(body["metadata"])
    if not await offload(request, responses_db(request).update_conversation, conv_id, metadata):
        raise conversation_not_found(conv_id)
    return await _conversation(request, conv_id)


@router.delete("/v1/conversations/{conv_id}")
async def delete_conversation(request: Request, conv_id: str) -> Response:
    if not await offload(request, responses_db(request).delete_conversation, conv_id):
        raise conversation_not_found(conv_id)
    return await json_response(request, deleted(conv_id, "conversation.deleted"))


@router.get("/v1/conversations/{conv_id}/items")
async def list_items(request: Request, conv_id: str) -> Response:
    db = responses_db(request)
    await offload(request, _known, db, conv_id)
    items = await offload(request, db.items, conv_id)
    return await json_response(request, _page(request, items))


@router.post("/v1/conversations/{conv_id}/items")
async def add_items(request: Request, conv_id: str) -> Response:
    body = await _body(request)
    if body.get("items") is None:
        raise InvalidRequest("items is required: an array of input items")
    items = new_items(body.get("items"))
    db = responses_db(request)
    await offload(request, db.check_room)
    if not await offload(request, db.add_items, conv_id, items):
        raise conversation_not_found(conv_id)
    # The items added, in order, as one page holding them all.
    added = page(items, limit=max(1, len(items)), order="asc", after=None)
    return await json_response(request, added)


@router.get("/v1/conversations/{conv_id}/items/{item_id}")
async def get_item(request: Request, conv_id: str, item_id: str) -> Response:
    db = responses_db(request)
    await offload(request, _known, db, conv_id)
    items = await offload(request, db.items, conv_id)
    for item in items:
        if item.get("id") == item_id:
            return await json_response(request, item)
    raise NotFound(f"Item with id '{item_id}' not found.")


@router.delete("/v1/conversations/{conv_id}/items/{item_id}")
async def delete_item(request: Request, conv_id: str, item_id: str) -> Response:
    db = responses_db(request)
    await offload(request, _known, db, conv_id)
    if not await offload(request, db.delete_item, conv_id, item_id):
        raise NotFound(f"Item with id '{item_id}' not found.")
    return await _conversation(request, conv_id)
