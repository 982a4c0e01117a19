"""Images in the TUI against the real daemon: ``/image``, pasted paths, what the message
shows and stores, reopening a chat, bad files and a text-only model's refusal.

``tiny-vision`` renders the messages' contents with the images placed before
each message's text (or at its ``[img]``), so a message ending in an image
continues with the exact greedy text of that image's colour.
"""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest
from textual import events
from textual.pilot import Pilot

from localllm.tui.screens.chat import ChatScreen
from localllm.tui.widgets.message import MessageView
from tests.support.daemon import Daemon
from tests.support.tinymodel import expected_greedy
from tests.support.tui import make_app, run_app, send, wait_for
from tests.support.visionmodel import GREEN, GREEN_GREEDY, N_IMAGE_TOKENS, RED, RED_GREEDY, png

VISION = "tiny-vision:latest"
RED_PNG, GREEN_PNG = png(32, 32, RED), png(32, 32, GREEN)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def huge_png_header() -> bytes:
    """A PNG whose header claims 20000x20000 pixels (no pixel data: only the header is read)."""
    body = b"IHDR" + struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + body + struct.pack(">I", zlib.crc32(body))


@pytest.fixture
def pictures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of test files, made the current directory (relative paths resolve there)."""
    folder = tmp_path / "pictures"
    folder.mkdir()
    (folder / "red.png").write_bytes(RED_PNG)
    (folder / "green.png").write_bytes(GREEN_PNG)
    (folder / "my photo.png").write_bytes(GREEN_PNG)
    (folder / "notes.txt").write_text("not an image\n")
    (folder / "huge.png").write_bytes(huge_png_header())
    monkeypatch.chdir(folder)
    return folder


async def command(pilot: Pilot[None], text: str) -> ChatScreen:
    screen: ChatScreen = pilot.app.chat_screen  # type: ignore[attr-defined]
    screen.prompt.load_text(text)
    await pilot.press("enter")
    await pilot.pause()
    return screen


def pending_names(screen: ChatScreen) -> list[str]:
    return [a.name for a in screen.pending.images]


def notices(pilot: Pilot[None], severity: str) -> list[str]:
    return [f"{n.title}: {n.message}" for n in pilot.app._notifications if n.severity == severity]


def attachments_shown(view: MessageView) -> str:
    return str(view.query_one(".attachments").render())


def test_image_command_attaches_and_the_reply_sees_the_image(
    tui_daemon: Daemon, tmp_path: Path, pictures: Path
) -> None:
    app = make_app(tui_daemon.url, tmp_path, model=VISION)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await command(pilot, "/image red.png")
        assert screen.prompt.text == "" and pending_names(screen) == ["red.png"]
        size = f"{len(RED_PNG)} B"
        assert screen.pending.display and f"📎 red.png · {size}" in str(screen.pending.render())
        assert any("📎 red.png" in n for n in notices(pilot, "information"))
        await command(pilot, "/image")  # lists what is attached
        assert "1 image for the next message: 📎 red.png" in notices(pilot, "information")[-1]
        # The question ends at the image, so the reply is the red image's greedy text.
        await send(pilot, "what colour is this? [img]")
        user, reply = screen.history
        assert reply.content == RED_GREEDY
        assert reply.stats["prompt_tokens"] == 1 + len("what colour is this? ") + N_IMAGE_TOKENS
        assert [(a.name, a.size, a.data) for a in user.images] == [
            ("red.png", len(RED_PNG), b64(RED_PNG))
        ]
        assert screen.request()["messages"][0]["images"] == [b64(RED_PNG)]
        assert attachments_shown(screen.message_views()[0]) == f"📎 red.png · {size}"
        assert not screen.message_views()[1].query_one(".attachments").display
        assert screen.pending.images == [] and not screen.pending.display
        # A message may be images alone: Enter on an empty prompt sends them.
        await command(pilot, f"/image {pictures / 'green.png'}")
        await send(pilot, "")
        assert screen.history[-1].content == GREEN_GREEDY
        stored = app.sessions.messages(screen.chat.id)  # type: ignore[union-attr]
        assert [[a.name for a in m.images] for m in stored] == [["red.png"], [], ["green.png"], []]
        assert stored[2].images[0].data == b64(GREEN_PNG)

    run_app(app, scenario)


def test_a_reopened_chat_lists_and_resends_its_images(
    tui_daemon: Daemon, tmp_path: Path, pictures: Path
) -> None:
    async def first(pilot: Pilot[None]) -> None:
        await command(pilot, "/image red.png")
        await send(pilot, "")

    run_app(make_app(tui_daemon.url, tmp_path, model=VISION), first)
    app = make_app(tui_daemon.url, tmp_path, model=VISION)

    async def second(pilot: Pilot[None]) -> None:
        screen: ChatScreen = app.chat_screen
        chat_id = app.sessions.chats()[0].id
        await screen.open_chat(chat_id)
        await pilot.pause()
        assert attachments_shown(screen.message_views()[0]) == f"📎 red.png · {len(RED_PNG)} B"
        # The same bytes go again (the engine's prefix cache keys on them), and the
        # conversation goes on from there.
        assert screen.request()["messages"][0]["images"] == [b64(RED_PNG)]
        await send(pilot, "x")
        assert screen.history[-1].content == expected_greedy("x")
        assert screen.history[-1].stats["prompt_tokens"] == (
            1 + N_IMAGE_TOKENS + len(RED_GREEDY) + 1
        )

    run_app(app, second)


def test_a_pasted_path_attaches_instead_of_inserting(
    tui_daemon: Daemon, tmp_path: Path, pictures: Path
) -> None:
    app = make_app(tui_daemon.url, tmp_path, model=VISION)

    async def scenario(pilot: Pilot[None]) -> None:
        screen: ChatScreen = app.chat_screen
        screen.prompt.load_text("compare ")
        screen.prompt.move_cursor(screen.prompt.document.end)
        screen.prompt.focus()
        # As a terminal's paste arrives: at the app, which hands it to the focused widget.
        for text in (
            f"'{pictures / 'red.png'}'",
            (pictures / "my photo.png").as_uri(),
            r"green.png my\ photo.png",
        ):
            app.post_message(events.Paste(text))
            await pilot.pause()
        assert pending_names(screen) == ["red.png", "my photo.png", "green.png", "my photo.png"]
        assert screen.prompt.text == "compare "  # the paths were not inserted
        # Text that is not only image paths is pasted as text.
        app.post_message(events.Paste("what is in red.png?"))
        await pilot.pause()
        assert screen.prompt.text == "compare what is in red.png?"
        assert len(screen.pending.images) == 4
        await command(pilot, "/image clear")
        assert screen.pending.images == [] and not screen.pending.display

    run_app(app, scenario)


def test_bad_files_are_refused_with_a_notice(
    tui_daemon: Daemon, tmp_path: Path, pictures: Path
) -> None:
    app = make_app(tui_daemon.url, tmp_path, model=VISION)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await command(pilot, "/image missing.png")
        await command(pilot, "/image notes.txt")
        await command(pilot, "/image huge.png")
        await command(pilot, f"/image {pictures}")
        assert screen.pending.images == [] and not screen.pending.display
        errors = notices(pilot, "error")
        assert errors == [
            f"Cannot attach image: {pictures / 'missing.png'}: no such file",
            "Cannot attach image: notes.txt: not a PNG, JPEG, GIF, BMP, WebP or AVIF file",
            "Cannot attach image: huge.png is 20000x20000 pixels; the limit is 50 "
            "megapixels and 16384 pixels a side",
            f"Cannot attach image: {pictures}: not a file",
        ]
        assert screen.prompt.text == "" and screen.history == []

    run_app(app, scenario)


def test_a_text_only_model_refuses_and_the_images_come_back(
    tui_daemon: Daemon, tmp_path: Path, pictures: Path
) -> None:
    app = make_app(tui_daemon.url, tmp_path, model="tiny-chat:latest")

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await command(pilot, "/image red.png")
        await send(pilot, "hello", wait=False)
        await wait_for(lambda: screen.prompt.text == "hello" and not screen.generating)
        await pilot.pause()
        assert screen.history == [] and screen.message_views() == []
        assert app.sessions.messages(screen.chat.id) == []  # type: ignore[union-attr]
        assert pending_names(screen) == ["red.png"] and screen.pending.display
        assert "does not support images" in notices(pilot, "error")[-1]
        # Ctrl+E brings a sent message's images back too.
        screen.use_model(VISION)
        await send(pilot, "[img]")
        assert screen.history[-1].content == RED_GREEDY
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert screen.prompt.text == "[img]" and pending_names(screen) == ["red.png"]

    run_app(app, scenario)
