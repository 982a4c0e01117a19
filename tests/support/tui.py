"""TUI-test helpers: the app on a daemon, a scenario run under Pilot, waiting on the UI,
sending a prompt, and the models the shared daemon (tests/tui/conftest.py) serves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from textual.pilot import Pilot

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.tui.app import LocalLLMApp
from localllm.tui.screens.chat import ChatScreen
from localllm.tui.sessions import Sessions
from tests.support.throttle_proxy import ThrottleProxy

CONTENTS_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
MODEL = "tiny-chat:latest"  # the daemon's chat model, on CONTENTS_TEMPLATE
SIZES = [(80, 24), (160, 48)]  # the snapshot tests' terminal sizes


def break_weights(name: str) -> None:
    """Cut the model's GGUF in half: listed and shown fine, fails to load."""
    store = Store(paths.models())
    blob = store.model_paths(store.get(parse_name(name)))[0]
    data = blob.read_bytes()
    blob.chmod(0o644)
    blob.write_bytes(data[: len(data) // 2])


def make_app(url: str, tmp_path: Path, **kw: object) -> LocalLLMApp:
    return LocalLLMApp(
        url, sessions=Sessions(tmp_path / "chats.sqlite3"), export_dir=tmp_path / "exports", **kw
    )  # type: ignore[arg-type]


def run_app(
    app: LocalLLMApp,
    scenario: Callable[..., Awaitable[None]],
    size: tuple[int, int] = (100, 30),
    proxy: ThrottleProxy | None = None,
    wait_ready: bool = True,
) -> None:
    """Run ``scenario(pilot)`` inside the app (tests stay plain functions).

    ``wait_ready=False`` for scenarios where a start-up dialog blocks readiness.
    """

    async def main() -> None:
        if proxy is not None:
            await proxy.start()
        try:
            async with app.run_test(size=size) as pilot:
                if wait_ready:
                    await asyncio.wait_for(app.ready.wait(), 30)
                    await pilot.pause()
                await scenario(pilot)
        finally:
            if proxy is not None:
                await proxy.stop()

    asyncio.run(main())


async def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll until ``condition()`` holds (the UI updates on its own timers)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def send(pilot: Pilot[None], text: str, *, wait: bool = True) -> ChatScreen:
    screen = pilot.app.chat_screen  # type: ignore[attr-defined]
    if screen.settings.temperature is None:
        screen.settings = replace(screen.settings, temperature=0.0, seed=1)
    before = len(screen.history)
    screen.prompt.load_text(text)
    await pilot.press("enter")
    if wait:
        await wait_for(lambda: len(screen.history) == before + 2 and not screen.generating)
        await pilot.pause()
    return screen


async def settle(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, LocalLLMApp)
    await asyncio.wait_for(app.ready.wait(), 10)
    # A blinking cursor is drawn or not depending on when the shot is taken (a slow
    # machine shot it "on" once): keep it steadily on.
    app.chat_screen.prompt.cursor_blink = False
    await app.workers.wait_for_complete()
    await pilot.pause()
