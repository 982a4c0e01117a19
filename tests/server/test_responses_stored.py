"""Stored Responses and the Conversations API through the official openai SDK, across a
daemon restart, on the script model of test_responses_sdk.py (greedy, so each reply is
the script's text): create, continue, retrieve, list input items, delete; conversations;
retention; the prompt cache reused by a continued response; the database's mode."""

from __future__ import annotations

import math
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.store.responses_db import ResponsesDB, StoreFull
from tests.server.test_responses_sdk import HELLO, TEMPLATE
from tests.support.daemon import Daemon, start_daemon
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.variants import openai_client, settings


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The script model stored; the daemon is started by each test (twice, for a restart)."""
    for key, value in settings(4, 512, {}).items():
        monkeypatch.setenv(key, value)
    gguf = make_script_model(
        tmp_path / "gguf",
        {"<|im_start|>assistant\n": HELLO},
        eos="<|im_end|>",
        chat_template=TEMPLATE,
    )
    import_gguf(Store(paths.models()), parse_name("script"), [gguf])
    return tmp_path


@pytest.fixture
def d(home: Path) -> Iterator[Daemon]:
    with start_daemon(home) as daemon:
        yield daemon


def _texts(items: Any) -> list[str]:
    return [part.text for item in items for part in item.content]


def test_create_continue_retrieve_list_delete_across_a_restart(home: Path) -> None:
    with start_daemon(home) as d:
        c = openai_client(d)
        # Over one block of 128 tokens: cached tokens are reported in whole blocks.
        first: Any = c.responses.create(model="script", input="hi " * 40, temperature=0)
        assert first.output_text == HELLO and first.store is True
        nxt: Any = c.responses.create(
            model="script", input="more", previous_response_id=first.id, temperature=0
        )
        assert nxt.output_text == HELLO and nxt.previous_response_id == first.id
        # The history was rendered ahead of the new input, so the prompt began with the
        # tokens the first request left in the slot: all of its prompt was reused.
        assert nxt.usage.input_tokens > first.usage.input_tokens + 5
        whole = first.usage.input_tokens - first.usage.input_tokens % 128
        assert whole >= 128
        assert nxt.usage.input_tokens_details.cached_tokens >= whole
        unstored: Any = c.responses.create(model="script", input="x", store=False)
        assert unstored.store is False
        events = list(
            c.responses.create(
                model="script",
                temperature=0,
                previous_response_id=nxt.id,
                input=[
                    {"role": "user", "content": "one"},
                    {"role": "assistant", "content": "two"},
                    {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
                ],
                stream=True,
            )
        )
        streamed = events[-1].response
        assert streamed.status == "completed" and streamed.output_text == HELLO
        # A stored: false response is unknown, as one never made.
        for missing in (unstored.id, "resp_nope"):
            with pytest.raises(openai.NotFoundError) as info:
                c.responses.create(model="script", input="y", previous_response_id=missing)
            error = info.value.response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["message"] == f"Response with id '{missing}' not found."

    with start_daemon(home) as d:  # a new daemon on the same home: all is still there
        c = openai_client(d)
        again: Any = c.responses.retrieve(nxt.id)
        assert again.id == nxt.id and again.output_text == HELLO
        assert again.previous_response_id == first.id
        assert again.usage.input_tokens == nxt.usage.input_tokens
        (item,) = c.responses.input_items.list(nxt.id).data
        assert item.type == "message" and item.role == "user" and item.id.startswith("msg_")
        assert _texts([item]) == ["more"]
        page: Any = c.responses.input_items.list(streamed.id, limit=2, order="asc")
        assert _texts(page.data) == ["one", "two"] and page.has_more
        rest: Any = c.responses.input_items.list(
            streamed.id, limit=2, order="asc", after=page.last_id
        )
        assert _texts(rest.data) == ["three"] and not rest.has_more
        newest_first = c.responses.input_items.list(streamed.id).data
        assert _texts(newest_first) == ["three", "two", "one"]
        with pytest.raises(openai.BadRequestError, match="limit"):
            c.responses.input_items.list(streamed.id, limit=0)

        # The chain continues after the restart: the whole history is rendered again.
        last: Any = c.responses.create(
            model="script", input="end", previous_response_id=streamed.id, temperature=0
        )
        assert last.usage.input_tokens > streamed.usage.input_tokens

        c.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.input_items.list(first.id)

    db = paths.responses_db()
    for f in (db, db.with_name(db.name + "-wal")):
        if f.exists():  # a private conversation is for its owner only
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_conversations(d: Daemon) -> None:
    c = openai_client(d)
    conv: Any = c.conversations.create(
        items=[{"type": "message", "role": "user", "content": "hi"}],
        metadata={"topic": "demo"},
    )
    assert conv.object == "conversation" and conv.id.startswith("conv_")
    assert c.conversations.retrieve(conv.id).metadata == {"topic": "demo"}
    updated: Any = c.conversations.update(conv.id, metadata={"topic": "other"})
    assert updated.metadata == {"topic": "other"}

    added: Any = c.conversations.items.create(
        conv.id, items=[{"type": "message", "role": "assistant", "content": "hello"}]
    )
    (assistant,) = added.data
    assert assistant.id.startswith("msg_")
    with pytest.raises(openai.BadRequestError, match="not supported"):
        c.conversations.items.create(conv.id, items=[{"type": "mystery"}])

    alone: Any = c.responses.create(model="script", input="next", temperature=0, store=False)
    within: Any = c.responses.create(
        model="script", input="next", conversation=conv.id, temperature=0
    )
    assert within.output_text == HELLO and within.conversation.id == conv.id
    # The conversation's two items came ahead of the input.
    assert within.usage.input_tokens > alone.usage.input_tokens + 5

    items: Any = c.conversations.items.list(conv.id, order="asc")
    kinds = [(i.type, i.role) for i in items.data]
    assert kinds == [("message", "user"), ("message", "assistant")] * 2
    assert items.data[2].content[0].text == "next" and items.data[3].id == within.output[0].id
    assert c.conversations.items.list(conv.id, limit=1).data[0].id == within.output[0].id

    got: Any = c.conversations.items.retrieve(assistant.id, conversation_id=conv.id)
    assert got.content[0].text == "hello"
    after: Any = c.conversations.items.delete(assistant.id, conversation_id=conv.id)
    assert after.id == conv.id
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.retrieve(assistant.id, conversation_id=conv.id)
    assert len(c.conversations.items.list(conv.id).data) == 3

    gone: Any = c.conversations.delete(conv.id)
    assert gone.deleted and gone.object == "conversation.deleted"
    for call in (
        lambda: c.conversations.retrieve(conv.id),
        lambda: c.conversations.items.list(conv.id),
        lambda: c.responses.create(model="script", input="x", conversation=conv.id),
    ):
        with pytest.raises(openai.NotFoundError, match="Conversation with id"):
            call()


def test_retention(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_RESPONSES_RETENTION", "5s")  # slack for a loaded machine
    with start_daemon(home) as d:
        c = openai_client(d)
        conv: Any = c.conversations.create()
        r: Any = c.responses.create(model="script", input="hi", temperature=0)
        stored = time.monotonic()
        assert c.responses.retrieve(r.id).id == r.id
        assert c.conversations.retrieve(conv.id).id == conv.id
        time.sleep(max(0.0, stored + 5.5 - time.monotonic()))
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(r.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.create(model="script", input="x", previous_response_id=r.id)
        with pytest.raises(openai.NotFoundError):
            c.conversations.retrieve(conv.id)
        # The next write deleted the expired rows for good.
        kept: Any = c.responses.create(model="script", input="hi", temperature=0)
    db = ResponsesDB(paths.responses_db(), math.inf, 0)
    assert db.response(r.id) is None and db.response(kept.id) is not None
    db.close()


def test_the_store_is_bounded(tmp_path: Path) -> None:
    db = ResponsesDB(tmp_path / "r.sqlite3", math.inf, 64 << 10)
    db.check_room()
    big = "x" * (80 << 10)
    db.save_response({"id": "resp_1", "output": [big]}, [], None)
    with pytest.raises(StoreFull, match="LOCALLLM_RESPONSES_MAX_SIZE") as info:
        db.check_room()
    assert info.value.status == 507
    assert db.delete_response("resp_1")
    db.check_room()  # room again once deleted (freed pages count as free)
    assert stat.S_IMODE((tmp_path / "r.sqlite3").stat().st_mode) == 0o600
    db.close()
