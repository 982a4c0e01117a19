"""Chatting against the real daemon and the tiny model: exact streamed text, stop, edit,
regenerate, copy, multi-line prompts, per-chat settings, load failures."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

from localllm.tui.app import LocalLLMApp
from localllm.tui.screens.chat import ChatScreen
from localllm.tui.screens.settings import SettingsScreen
from localllm.tui.sessions import Sessions
from localllm.tui.widgets.message import REFRESH_HZ, MessageView
from tests.support.daemon import Daemon
from tests.support.throttle_proxy import ThrottleProxy
from tests.support.tinymodel import LOOP_PROMPT, expected_greedy
from tests.support.tui import MODEL, make_app, run_app, send, wait_for

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)


def chat_app(daemon: Daemon, tmp_path: Path) -> LocalLLMApp:
    return make_app(daemon.url, tmp_path, model=MODEL)


async def start_long_reply(pilot: Pilot[None], at_least: int) -> tuple[ChatScreen, MessageView]:
    """Send ``LOOP_PROMPT`` and return once ``at_least`` characters of the reply arrived."""
    screen = await send(pilot, LOOP_PROMPT, wait=False)
    await wait_for(lambda: len(screen.message_views()) == 2)
    view = screen.message_views()[-1]
    await wait_for(lambda: view.reply is not None and len(view.reply.content) >= at_least)
    return screen, view


def test_reply_streams_exact_text_and_is_saved(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await send(pilot, "hello")
        assert screen.model == MODEL
        assert [m.content for m in screen.history] == ["hello", expected_greedy("hello")]
        view = screen.message_views()[-1]
        assert view.query_one(".body").source == "pqrstuvwxyz"  # type: ignore[attr-defined]
        # The second turn is rendered after the first: history goes with the request.
        await send(pilot, "a")
        assert screen.history[-1].content == expected_greedy("hellopqrstuvwxyza")
        stored = app.sessions.messages(screen.chat.id)  # type: ignore[union-attr]
        assert [(m.role, m.content, m.partial) for m in stored] == [
            (m.role, m.content, False) for m in screen.history
        ]
        await wait_for(lambda: screen.status.status.loaded)
        line = screen.status.status.text()
        stats = screen.history[-1].stats
        used = stats["prompt_tokens"] + stats["tokens"]
        assert stats["prompt_tokens"] == len("hellopqrstuvwxyza") + 1  # BOS
        assert f"ctx {used}/512" in line and "tok/s" in line and "TTFT" in line
        assert "100% CPU" in line and MODEL in line

    run_app(app, scenario)


def test_escape_stops_generation_and_keeps_the_partial_reply(
    tui_daemon: Daemon, tmp_path: Path
) -> None:
    # Through the proxy the reply arrives at ~200 tokens/s instead of thousands.
    proxy = ThrottleProxy(tui_daemon.url)
    app = make_app(proxy.url, tmp_path, model=MODEL)

    async def scenario(pilot: Pilot[None]) -> None:
        screen, view = await start_long_reply(pilot, 20)
        await pilot.press("escape")
        await wait_for(lambda: not screen.generating)
        await pilot.pause()
        reply = screen.history[-1]
        assert reply.partial and reply.stats["interrupted"] == "stopped"
        assert 20 <= len(reply.content) < 512 and set(reply.content) == {"A"}
        assert "[stopped]" in str(view.query_one(".role").render())
        assert app.sessions.messages(screen.chat.id)[-1].partial  # type: ignore[union-attr]
        # The next reply comes normally.
        await send(pilot, "x")
        assert screen.history[-1].content == "yz"

    run_app(app, scenario, proxy=proxy)


def test_streaming_redraws_are_batched(tui_daemon: Daemon, tmp_path: Path) -> None:
    proxy = ThrottleProxy(tui_daemon.url)
    app = make_app(proxy.url, tmp_path, model=MODEL)

    async def scenario(pilot: Pilot[None]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        screen = await send(pilot, LOOP_PROMPT)
        elapsed = loop.time() - started
        view = screen.message_views()[-1]
        reply = screen.history[-1]
        # An unlimited reply ends after a context's worth of tokens (512), shifted or not.
        assert len(reply.content) == 512 and reply.stats["done_reason"] == "length"
        # One redraw per timer tick at most, whatever the token rate.
        assert view.redraws <= elapsed * REFRESH_HZ + 2
        assert view.redraws < len(reply.content) / 4
        assert view.query_one(".body").source == reply.content  # type: ignore[attr-defined]

    run_app(app, scenario, proxy=proxy)


def test_daemon_gone_mid_stream_keeps_and_marks_the_partial_reply(
    tui_daemon: Daemon, tmp_path: Path
) -> None:
    proxy = ThrottleProxy(tui_daemon.url)
    app = make_app(proxy.url, tmp_path, model=MODEL)

    async def scenario(pilot: Pilot[None]) -> None:
        screen, view = await start_long_reply(pilot, 10)
        proxy.cut()
        await wait_for(lambda: not screen.generating)
        await pilot.pause()
        reply = screen.history[-1]
        assert reply.partial and reply.stats["interrupted"] == "interrupted"
        assert len(reply.content) >= 10 and set(reply.content) == {"A"}
        assert "[interrupted]" in str(view.query_one(".role").render())
        stored = app.sessions.messages(screen.chat.id)  # type: ignore[union-attr]
        assert stored[-1].partial and stored[-1].content == reply.content
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert any("connection to the daemon lost" in m for m in errors)
        assert app.is_running

    run_app(app, scenario, proxy=proxy)


def test_edit_and_resend_the_last_message(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await send(pilot, "hello")
        await pilot.press("ctrl+e")
        assert screen.prompt.text == "hello" and screen.history == []
        assert screen.message_views() == []
        await pilot.press("backspace", "backspace", "backspace", "backspace", "backspace", "x")
        await pilot.press("enter")
        await wait_for(lambda: len(screen.history) == 2 and not screen.generating)
        assert [m.content for m in screen.history] == ["x", "yz"]
        stored = app.sessions.messages(screen.chat.id)  # type: ignore[union-attr]
        assert [m.content for m in stored] == ["x", "yz"]

    run_app(app, scenario)


def test_regenerate_replaces_the_last_reply(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await send(pilot, "hello")
        first_id = screen.history[-1].id
        await pilot.press("ctrl+r")
        await wait_for(lambda: screen.history[-1].id != first_id and not screen.generating)
        assert [m.content for m in screen.history] == ["hello", "pqrstuvwxyz"]
        assert screen.history[-1].id != first_id
        assert len(screen.message_views()) == 2
        assert len(app.sessions.messages(screen.chat.id)) == 2  # type: ignore[union-attr]

    run_app(app, scenario)


def test_copy_last_reply_and_a_focused_message(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await send(pilot, "hello")
        await pilot.press("ctrl+y")
        assert app.clipboard == "pqrstuvwxyz"
        screen.message_views()[0].focus()
        await pilot.press("c")
        assert app.clipboard == "hello"

    run_app(app, scenario)


def test_ctrl_j_makes_a_multi_line_prompt(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        screen: ChatScreen = app.chat_screen
        screen.settings = replace(screen.settings, temperature=0.0, seed=1)
        await pilot.press("h", "e", "l", "ctrl+j", "l", "o")
        assert screen.prompt.text == "hel\nlo" and not screen.history
        await pilot.press("enter")
        await wait_for(lambda: len(screen.history) == 2 and not screen.generating)
        assert [m.content for m in screen.history] == ["hel\nlo", expected_greedy("hel\nlo")]

    run_app(app, scenario)


def test_settings_are_used_and_saved_with_the_chat(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        screen: ChatScreen = app.chat_screen
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SettingsScreen)
        await pilot.press("B", "e", "space", "b", "r", "i", "e", "f")
        for key, value in (
            ("temperature", "0"),
            ("num_ctx", "256"),
            ("seed", "7"),
            ("keep_alive", "10m"),
        ):
            app.screen.query_one(f"#{key}").value = value  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        assert screen.settings.system == "Be brief" and screen.settings.num_ctx == 256
        await send(pilot, "hello")
        # The system prompt was sent: it is part of the evaluated prompt.
        assert screen.history[-1].stats["prompt_tokens"] == len("Be briefhello") + 1
        assert screen.history[-1].content == "pqrstuvwxyz"
        await wait_for(lambda: "/256" in screen.status.status.text())
        saved = Sessions(app.sessions.path).get(screen.chat.id)  # type: ignore[union-attr]
        assert (
            saved.settings.system,
            saved.settings.temperature,
            saved.settings.num_ctx,
            saved.settings.seed,
            saved.settings.keep_alive,
        ) == ("Be brief", 0.0, 256, 7, "10m")

    run_app(app, scenario)


def test_bad_setting_is_refused_in_the_form(tui_daemon: Daemon, tmp_path: Path) -> None:
    app = chat_app(tui_daemon, tmp_path)

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("ctrl+s")
        app.screen.query_one("#temperature").value = "warm"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SettingsScreen)
        assert "temperature" in str(app.screen.query_one("#error").render())

    run_app(app, scenario)


def test_model_that_fails_to_load_gives_an_error_and_keeps_the_prompt(
    tui_daemon: Daemon, tmp_path: Path
) -> None:
    app = make_app(tui_daemon.url, tmp_path, model="broken")

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await send(pilot, "hello", wait=False)
        await wait_for(lambda: screen.prompt.text == "hello" and not screen.generating)
        assert screen.history == [] and screen.message_views() == []
        assert app.sessions.messages(screen.chat.id) == []  # type: ignore[union-attr]
        errors = [n for n in app._notifications if n.severity == "error"]
        assert errors and errors[-1].title == "Request failed"

    run_app(app, scenario)


def test_new_chat_mid_reply_files_the_partial_under_the_old_chat(
    tui_daemon: Daemon, tmp_path: Path
) -> None:
    proxy = ThrottleProxy(tui_daemon.url)
    app = make_app(proxy.url, tmp_path, model=MODEL)

    async def scenario(pilot: Pilot[None]) -> None:
        screen, _ = await start_long_reply(pilot, 10)
        old = screen.chat
        assert old is not None
        await pilot.press("ctrl+n")
        await wait_for(lambda: not screen.generating)
        await pilot.pause()
        assert screen.chat is None and screen.history == [] and screen.message_views() == []
        stored = app.sessions.messages(old.id)
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[1].partial and set(stored[1].content) == {"A"}

    run_app(app, scenario, proxy=proxy)
