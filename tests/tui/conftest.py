"""TUI fixtures: one real daemon per module serving tiny models, and app helpers.

``tiny-chat`` has a chat template that renders only the messages' contents, so
the tiny model's greedy continuation of the conversation is a known text
(``tests.tinymodel.expected_greedy`` of the rendered prompt).  ``broken`` is
stored fine but its weights are cut short, so loading it fails; ``spare`` is
there to be deleted.  ``tiny-vision`` is ``tiny-chat`` with tests/visionmodel.py's
projector: a message ending in an image continues with that colour's greedy text.

Starting the daemon costs seconds, so the behaviour tests of a module share
one; each test still gets its own ``LOCALLLM_HOME`` (the chat store lives
there) from the autouse fixture.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from localllm import paths
from localllm.store.importer import import_gguf
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.tui.app import LocalLLMApp
from localllm.tui.sessions import Sessions
from tests.cli.conftest import Daemon, hub_daemon, start_daemon
from tests.conftest import isolate
from tests.inference.conftest import add_tiny
from tests.server.conftest import hub
from tests.tinymodel import make_tiny_model
from tests.tui.proxy import ThrottleProxy
from tests.visionmodel import make_projector

__all__ = ["hub", "hub_daemon"]  # fixtures for the pull tests

CONTENTS_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def break_weights(name: str) -> None:
    """Cut the model's GGUF in half: listed and shown fine, fails to load."""
    store = Store(paths.models())
    blob = store.model_paths(store.get(parse_name(name)))[0]
    data = blob.read_bytes()
    blob.chmod(0o644)
    blob.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def tui_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("tui-daemon")
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, tmp / "home")
        mp.setenv("LOCALLLM_NUM_PARALLEL", "2")
        mp.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
        add_tiny(tmp, "tiny-chat", chat_template=CONTENTS_TEMPLATE)
        add_tiny(tmp, "broken", n_ctx_train=1024)
        add_tiny(tmp, "spare", n_ctx_train=512)
        break_weights("broken")
        model = make_tiny_model(tmp / "gguf-vision", chat_template=CONTENTS_TEMPLATE)
        import_gguf(Store(paths.models()), parse_name("tiny-vision"), [model],
                    projector=make_projector(tmp / "mmproj"))
        with start_daemon(tmp) as daemon:
            yield daemon


def make_app(url: str, tmp_path: Path, **kw: object) -> LocalLLMApp:
    return LocalLLMApp(url, sessions=Sessions(tmp_path / "chats.sqlite3"),
                       export_dir=tmp_path / "exports", **kw)  # type: ignore[arg-type]


def run_app(app: LocalLLMApp, scenario: Callable[..., Awaitable[None]],
            size: tuple[int, int] = (100, 30), proxy: ThrottleProxy | None = None,
            wait_ready: bool = True) -> None:
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
