"""Smoke test of an installed localllm (a pipx install): daemon, create, the TUI replying, and
the TUI's search → pull → chat flow.

Run with the installed environment's Python, from outside the source tree, so
nothing of the checkout can be imported by accident::

    $PIPX_HOME/venvs/localllm/bin/python packaging/smoke.py

It writes the tests' tiny model (tests/support/tinymodel.py, loaded by file path: it
needs only numpy and gguf), starts ``localllm serve`` from the same install on
a free port with a throw-away LOCALLLM_HOME, creates the model with
``localllm create``, then runs the Textual app headless (``run_test``), sends
"hello" and checks the exact reply.  Then, with the tests' Hugging Face stand-in
(tests/support/hubstub.py, standard library only) serving the same model as a GGUF repo,
it drives the model picker as a user would: Ctrl+O, ``s``, type a query, Enter,
Enter on the repo, Enter on the quant (pulled with the progress bar), Enter on
the new model, "hello", and checks that reply too.  Exit status 0 on success.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "tests" / "support" / "tinymodel.py"
HUBSTUB = HERE.parent / "tests" / "support" / "hubstub.py"
HUB_REPO, HUB_FILE = "smoke/Tiny-GGUF", "tiny-Q8_0.gguf"
CONTENTS_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def load_by_path(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def load_tinymodel() -> Any:
    return load_by_path("tinymodel", TINY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("localllm")
    return subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=300)


async def chat(url: str, tmp: Path, model: str) -> str:
    from localllm.tui.app import LocalLLMApp
    from localllm.tui.sessions import Sessions

    app = LocalLLMApp(
        url,
        sessions=Sessions(tmp / "chats.sqlite3"),  # type: ignore[arg-type]
        export_dir=tmp / "exports",
        model=model,
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(app.ready.wait(), 60)
        screen = app.chat_screen  # type: ignore[attr-defined]
        from dataclasses import replace

        screen.settings = replace(screen.settings, temperature=0.0, seed=1)
        screen.prompt.load_text("hello")
        await pilot.press("enter")
        deadline = time.monotonic() + 60
        while len(screen.history) < 2 or screen.generating:
            if time.monotonic() > deadline:
                raise SystemExit("smoke: no reply from the TUI within 60 s")
            await asyncio.sleep(0.05)
        return str(screen.history[-1].content)


async def until(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"smoke: {what} not seen within {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def search_pull_chat(url: str, tmp: Path) -> tuple[str, str]:
    """Search the stand-in Hub from the model picker, pull the quant, chat with it:
    the pulled name and the reply."""
    from dataclasses import replace

    from localllm.tui.app import LocalLLMApp
    from localllm.tui.screens.models import ModelsScreen
    from localllm.tui.screens.search import SearchScreen
    from localllm.tui.sessions import Sessions

    app = LocalLLMApp(
        url, sessions=Sessions(tmp / "chats-search.sqlite3"), export_dir=tmp / "exports"
    )
    async with app.run_test(size=(120, 36)) as pilot:
        await asyncio.wait_for(app.ready.wait(), 60)
        await pilot.press("ctrl+o", "s")
        await until(lambda: isinstance(app.screen, SearchScreen), "the search screen")
        search = app.screen
        assert isinstance(search, SearchScreen)
        await pilot.press(*"tiny", "enter")
        await until(lambda: bool(search.results) and not search.searching, "search results")
        await pilot.pause()
        if not search.quants:
            raise SystemExit(f"smoke: the search found no quants: {search.results!r}")
        await pilot.press("enter", "enter")  # to the quants, then pull the first
        await until(lambda: isinstance(app.screen, ModelsScreen), "the pulled model", 120)
        models = app.screen
        assert isinstance(models, ModelsScreen)
        # The picker comes back with its old rows (the model created first) and refreshes
        # in a worker: wait for the list that holds the pulled model (the refresh
        # highlights it in the same step), not just any list.
        await until(
            lambda: any(r.name.startswith(f"hf.co/{HUB_REPO}") for r in models.rows),
            "the model list with the pulled model",
        )
        picked = models.selected()
        if picked is None:
            raise SystemExit("smoke: nothing highlighted after the pull")
        await pilot.press("enter")
        await pilot.pause()
        screen = app.chat_screen
        screen.settings = replace(screen.settings, temperature=0.0, seed=1)
        screen.prompt.load_text("hello")
        await pilot.press("enter")
        await until(lambda: len(screen.history) >= 2 and not screen.generating, "a reply")
        return picked.name, str(screen.history[-1].content)


def main() -> int:
    import localllm

    if Path(localllm.__file__).resolve().is_relative_to(HERE.parent):
        raise SystemExit(
            f"smoke: imported localllm from the checkout ({localllm.__file__}); "
            "run it with the installed environment's Python"
        )
    tm = load_tinymodel()
    hub = load_by_path("hubstub", HUBSTUB)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gguf = tm.make_tiny_model(tmp / "gguf", chat_template=CONTENTS_TEMPLATE)
        (tmp / "Modelfile").write_text(f"FROM {gguf}\n")
        stub = hub.HubStub(tmp / "hub").start()
        stub.add_file(HUB_REPO, HUB_FILE, gguf)
        port = free_port()
        env = {
            **os.environ,
            "HF_ENDPOINT": stub.url,
            "LOCALLLM_HOME": str(tmp / "home"),
            "LOCALLLM_HOST": f"127.0.0.1:{port}",
            "LOCALLLM_NUM_THREAD": "1",
            "LOCALLLM_CONTEXT_LENGTH": "512",
            "LOCALLLM_NUM_PARALLEL": "1",
        }
        env.pop("PYTHONPATH", None)
        os.environ.update({k: env[k] for k in ("LOCALLLM_HOME", "LOCALLLM_HOST")})
        exe = Path(sys.executable).with_name("localllm")
        with open(tmp / "serve.log", "wb") as log:
            daemon = subprocess.Popen(
                [str(exe), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            print(cli("--version", env=env).stdout.strip())
            created = cli("create", "smoke", "-f", str(tmp / "Modelfile"), env=env)
            if created.returncode != 0:
                raise SystemExit(
                    f"smoke: create failed: {created.stderr}\n"
                    f"{(tmp / 'serve.log').read_text()[-2000:]}"
                )
            reply = asyncio.run(chat(f"http://127.0.0.1:{port}", tmp, "smoke:latest"))
            pulled, searched = asyncio.run(search_pull_chat(f"http://127.0.0.1:{port}", tmp))
        finally:
            daemon.terminate()
            daemon.wait(30)
            stub.stop()
        want = tm.expected_greedy("hello")
        if reply != want:
            raise SystemExit(f"smoke: the TUI showed {reply!r}, expected {want!r}")
        print(f"smoke: installed localllm served a model and the TUI replied {reply!r}")
        if (pulled, searched) != (f"hf.co/{HUB_REPO}:Q8_0", want):
            raise SystemExit(
                f"smoke: the TUI's search pulled {pulled!r} and replied "
                f"{searched!r}, expected hf.co/{HUB_REPO}:Q8_0 and {want!r}"
            )
        print(f"smoke: the TUI searched the Hub, pulled {pulled} and it replied {searched!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
