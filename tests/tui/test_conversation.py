"""The ``Conversation`` widget alone, in a harness app with the scripted daemon: what it
posts when a reply is kept and when a failed request is taken back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from textual import on
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from localllm.api.client import AsyncClient
from localllm.tui.sessions import Sessions
from localllm.tui.widgets.conversation import Conversation
from tests.support.tui import wait_for
from tests.support.tui_fakes import FAKE_URL, FakeDaemon, chat_reply


class Harness(App[None]):
    """Mounts one ``Conversation`` and records what it posts."""

    def __init__(self, conversation: Conversation) -> None:
        super().__init__()
        self.conversation = conversation
        self.posted: list[Conversation.ReplyStarted | Conversation.ReplyEnded] = []

    def compose(self) -> ComposeResult:
        yield self.conversation

    @on(Conversation.ReplyStarted)
    @on(Conversation.ReplyEnded)
    def record(self, event: Conversation.ReplyStarted | Conversation.ReplyEnded) -> None:
        self.posted.append(event)


def run_conversation(
    transport: httpx.AsyncBaseTransport,
    tmp_path: Path,
    scenario: Callable[[Pilot[None], Conversation], Awaitable[None]],
) -> None:
    async def main() -> None:
        client = AsyncClient(FAKE_URL, transport=transport)
        conversation = Conversation(client, Sessions(tmp_path / "chats.sqlite3"))
        conversation.model = "qwen2.5:0.5b"
        try:
            async with Harness(conversation).run_test() as pilot:
                conversation.prompt.focus()
                await scenario(pilot, conversation)
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_kept_reply_is_posted_with_the_message_saved(tmp_path: Path) -> None:
    fake = FakeDaemon(chat_chunks=chat_reply("Hello there."))

    async def scenario(pilot: Pilot[None], conversation: Conversation) -> None:
        app = pilot.app
        assert isinstance(app, Harness)
        conversation.prompt.load_text("hi")
        await pilot.press("enter")
        await wait_for(lambda: len(app.posted) == 2)
        started, ended = app.posted
        assert isinstance(started, Conversation.ReplyStarted)
        assert isinstance(ended, Conversation.ReplyEnded)
        assert ended.reply is conversation.history[-1]
        assert ended.reply.content == "Hello there. " and ended.reply.stats["tokens"] == 30
        assert conversation.chat is not None and conversation.chat.title == "hi"
        stored = conversation.sessions.messages(conversation.chat.id)
        assert [(m.role, m.content) for m in stored] == [
            ("user", "hi"),
            ("assistant", "Hello there. "),
        ]

    run_conversation(fake.transport(), tmp_path, scenario)


def test_a_failed_request_is_taken_back_and_posted_without_a_reply(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": "the model failed to load"})

    async def scenario(pilot: Pilot[None], conversation: Conversation) -> None:
        app = pilot.app
        assert isinstance(app, Harness)
        conversation.prompt.load_text("hi")
        await pilot.press("enter")
        await wait_for(lambda: len(app.posted) == 2)
        ended = app.posted[-1]
        assert isinstance(ended, Conversation.ReplyEnded) and ended.reply is None
        assert conversation.history == [] and conversation.message_views() == []
        assert conversation.prompt.text == "hi" and not conversation.generating
        assert conversation.chat is not None
        assert conversation.sessions.messages(conversation.chat.id) == []

    run_conversation(httpx.MockTransport(refuse), tmp_path, scenario)
