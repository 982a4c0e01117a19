"""Smoke test of an installed localllm (a pipx install): daemon, create, and the TUI replying.

Run with the installed environment's Python, from outside the source tree, so
nothing of the checkout can be imported by accident::

    $PIPX_HOME/venvs/localllm/bin/python packaging/smoke.py

It writes the tests' tiny model (tests/tinymodel.py, loaded by file path: it
needs only numpy and gguf), starts ``localllm serve`` from the same install on
a free port with a throw-away LOCALLLM_HOME, creates the model with
``localllm create``, then runs the Textual app headless (``run_test``), sends
"hello" and checks the exact reply.  Exit status 0 on success.
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
TINY = HERE.parent / "tests" / "tinymodel.py"
CONTENTS_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def load_tinymodel() -> Any:
    spec = importlib.util.spec_from_file_location("tinymodel", TINY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("localllm")
    return subprocess.run([str(exe), *args], env=env, capture_output=True, text=True,
                          timeout=300)


async def chat(url: str, tmp: Path, model: str) -> str:
    from localllm.tui.app import LocalLLMApp
    from localllm.tui.sessions import Sessions

    app = LocalLLMApp(url, sessions=Sessions(tmp / "chats.sqlite3"),  # type: ignore[arg-type]
                      export_dir=tmp / "exports", model=model)
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


def main() -> int:
    import localllm

    if Path(localllm.__file__).resolve().is_relative_to(HERE.parent):
        raise SystemExit(f"smoke: imported localllm from the checkout ({localllm.__file__}); "
                         "run it with the installed environment's Python")
    tm = load_tinymodel()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gguf = tm.make_tiny_model(tmp / "gguf", chat_template=CONTENTS_TEMPLATE)
        (tmp / "Modelfile").write_text(f"FROM {gguf}\n")
        port = free_port()
        env = {**os.environ, "LOCALLLM_HOME": str(tmp / "home"),
               "LOCALLLM_HOST": f"127.0.0.1:{port}", "LOCALLLM_NUM_THREAD": "1",
               "LOCALLLM_CONTEXT_LENGTH": "512", "LOCALLLM_NUM_PARALLEL": "1"}
        env.pop("PYTHONPATH", None)
        os.environ.update({k: env[k] for k in ("LOCALLLM_HOME", "LOCALLLM_HOST")})
        exe = Path(sys.executable).with_name("localllm")
        with open(tmp / "serve.log", "wb") as log:
            daemon = subprocess.Popen([str(exe), "serve"], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
        try:
            print(cli("--version", env=env).stdout.strip())
            created = cli("create", "smoke", "-f", str(tmp / "Modelfile"), env=env)
            if created.returncode != 0:
                raise SystemExit(f"smoke: create failed: {created.stderr}\n"
                                 f"{(tmp / 'serve.log').read_text()[-2000:]}")
            reply = asyncio.run(chat(f"http://127.0.0.1:{port}", tmp, "smoke:latest"))
        finally:
            daemon.terminate()
            daemon.wait(30)
        want = tm.expected_greedy("hello")
        if reply != want:
            raise SystemExit(f"smoke: the TUI showed {reply!r}, expected {want!r}")
        print(f"smoke: installed localllm served a model and the TUI replied {reply!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
