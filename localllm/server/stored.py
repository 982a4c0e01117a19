"""What ``/v1/responses`` does with stored state: find the history, then keep the answer.

Owned here: the app's one :class:`~localllm.store.responses_db.ResponsesDB`
(made on first use, closed at shutdown), the converter that looks up the
history a request names before converting it (:func:`converter`: it runs in a
worker thread, so the database is read off the event loop), and
:func:`record`, which stores a finished response and appends its items to its
conversation.  A ``previous_response_id`` or ``conversation`` that is not
stored (unknown, deleted, expired, or answered with ``store: false``) is a 404
in OpenAI's shape.

The history is the chain's items, oldest first: each stored response's input
items then its output items; for a conversation, its items.  Given to the
converter ahead of the new input, they render to the very messages the earlier
request rendered, so the prompt starts with the tokens the engine already holds
(prefix reuse, see docs/api.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from starlette.requests import Request

from localllm import config, paths
from localllm.api.wire import JSONObject
from localllm.compat.frames import FrameStream
from localllm.compat.responses.request import (
    ResponsesConversion,
    responses_request_to_native,
    stored_state,
)
from localllm.compat.responses.stored import output_as_items
from localllm.compat.responses.types import ResponseObject, ResponsesRequest
from localllm.errors import InvalidRequest, NotFound
from localllm.store.responses_db import ResponsesDB

T = TypeVar("T")


def responses_db(request: Request) -> ResponsesDB:
    """The app's database of stored responses; nothing touches the disk until it is used."""
    state = request.app.state
    db: ResponsesDB | None = getattr(state, "responses_db", None)
    if db is None:
        db = ResponsesDB(
            paths.responses_db(),
            config.RESPONSES_RETENTION.get(),
            config.RESPONSES_MAX_SIZE.get(),
        )
        state.responses_db = db
        hooks: list[Callable[[], Awaitable[None]]] | None = getattr(state, "on_shutdown", None)
        if hooks is not None:
            hooks.append(_closer(db))
    return db


def _closer(db: ResponsesDB) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        db.close()

    return close


def response_not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.")


def conversation_not_found(conv_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{conv_id}' not found.")


def history(db: ResponsesDB, body: ResponsesRequest) -> list[JSONObject]:
    """The stored items ``body`` continues (its previous response's chain, or its
    conversation's items); a 404 when the one it names is not stored."""
    state = stored_state(body)
    previous, conversation = state.get("previous_response_id"), state.get("conversation")
    if previous is not None:
        chain = db.chain(previous)
        if chain is None:
            raise response_not_found(previous)
        items: list[JSONObject] = []
        for stored in chain:
            items += stored.input
            items += output_as_items(stored.response.get("output"))
        return items
    if conversation is not None:
        if db.conversation(conversation["id"]) is None:
            raise conversation_not_found(conversation["id"])
        return db.items(conversation["id"])
    return []


def converter(
    db: ResponsesDB, *, storing: bool = True
) -> Callable[[ResponsesRequest], ResponsesConversion]:
    """``responses_request_to_native`` with the history looked up first (a worker
    thread's work); ``storing`` (not for a token count), with something to store, the
    database must have room."""

    def convert(body: ResponsesRequest) -> ResponsesConversion:
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        found = history(db, body)
        conv = responses_request_to_native(body, found)
        if storing and (conv.echo.get("store") or conv.echo.get("conversation")):
            db.check_room()
        return conv

    return convert


def record(db: ResponsesDB, conv: ResponsesConversion, response: ResponseObject) -> None:
    """Keep a finished response (unless ``store`` was false) and add its input and output
    to its conversation."""
    obj: JSONObject = dict(response)  # type: ignore[arg-type]  # a TypedDict is JSON
    output = output_as_items(obj.get("output"))
    if conv.echo.get("store"):
        db.save_response(obj, conv.input_items, conv.echo.get("previous_response_id"))
    conversation = conv.echo.get("conversation")
    if conversation is not None:
        db.add_items(conversation["id"], [*conv.input_items, *output])


class KeptStream(Generic[T]):
    """A stream's frames (``shaper``'s), and ``keep()`` awaited once the last item is fed.

    The SSE pump runs the items in a task of its own, ahead of the frames
    (``disconnect.guarded``), so the run ending is not the response finished:
    :meth:`items` waits until the shaper has been fed every item, then keeps it,
    before the pump may end the stream (a client that reads the last event and
    asks for the response at once finds it).
    """

    def __init__(self, shaper: FrameStream[T], keep: Callable[[], Awaitable[None]]) -> None:
        self.shaper, self.keep = shaper, keep
        self._produced = self._fed = 0
        self._caught_up = asyncio.Event()

    def start(self) -> list[str]:
        return self.shaper.start()

    def feed(self, item: T) -> list[str]:
        frames = self.shaper.feed(item)
        self._fed += 1
        if self._fed == self._produced:
            self._caught_up.set()
        return frames

    def end(self) -> list[str]:
        return self.shaper.end()

    def fail(self, exc: BaseException) -> list[str]:
        return self.shaper.fail(exc)

    async def items(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        """``source``'s items, then ``keep()`` once all were fed (not when abandoned)."""
        async for item in source:
            self._produced += 1
            self._caught_up.clear()
            yield item
        if self._fed < self._produced:
            await self._caught_up.wait()
        await self.keep()
