"""What the tiny model cannot produce, with the scripted daemon: thinking (folded),
tool calls, and the exact request a chat's settings make."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Collapsible, Static

from tests.support.tui import run_app, wait_for
from tests.support.tui_fakes import FakeDaemon, chat_reply, fake_app


def test_thinking_is_folded_and_tool_calls_are_shown(tmp_path: Path) -> None:
    call = {"function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
    fake = FakeDaemon(
        chat_chunks=chat_reply("The answer is 4.", thinking="Two plus two.", tool_calls=[call])
    )
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = app.chat_screen
        screen.prompt.load_text("What is 2+2?")
        await pilot.press("enter")
        await wait_for(lambda: len(screen.history) == 2 and not screen.generating)
        await pilot.pause()
        reply = screen.history[-1]
        assert reply.content == "The answer is 4. " and reply.thinking == "Two plus two. "
        assert reply.tool_calls == [call]
        view = screen.message_views()[-1]
        folded = view.query_one(".thinking", Collapsible)
        assert folded.display and folded.collapsed
        assert str(view.query_one(".thinking-text", Static).render()) == "Two plus two. "
        calls = view.query_one(".tool-calls", Static)
        assert calls.display and str(calls.render()) == "⚙ add(a=2, b=2)"
        # A plain user message shows neither.
        assert not screen.message_views()[0].query_one(".thinking", Collapsible).display
        # Stored with the chat, and sent back as history on the next turn.
        stored = app.sessions.messages(screen.chat.id)[-1]  # type: ignore[union-attr]
        assert stored.thinking == reply.thinking and stored.tool_calls == [call]
        screen.prompt.load_text("thanks")
        await pilot.press("enter")
        await wait_for(lambda: len(screen.history) == 4 and not screen.generating)
        sent = [b for m, p, b in fake.requests if p == "/api/chat"][-1]
        assert sent["messages"][1] == {
            "role": "assistant",
            "content": "The answer is 4. ",
            "tool_calls": [call],
        }

    run_app(app, scenario)


def test_settings_go_into_the_request(tmp_path: Path) -> None:
    fake = FakeDaemon(chat_chunks=chat_reply("ok"))
    app = fake_app(tmp_path, fake)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = app.chat_screen
        await screen.open_chat(1)  # seeded: system "You are terse.", temperature 0.2
        screen.prompt.load_text("again")
        await pilot.press("enter")
        await wait_for(lambda: len(screen.history) == 4 and not screen.generating)
        sent = [b for m, p, b in fake.requests if p == "/api/chat"][-1]
        assert sent["model"] == "qwen2.5:0.5b" and sent["stream"] is True
        assert sent["options"] == {"temperature": 0.2}
        assert sent["messages"][0] == {"role": "system", "content": "You are terse."}
        assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]

    run_app(app, scenario)
