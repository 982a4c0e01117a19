"""Start-up time of ``localllm chat`` to a usable prompt, with a warm daemon.

Runs the real command in a pseudo-terminal (80x24) and times, from spawn, two
moments read off the screen output: the prompt drawn (its placeholder text
appears) and the model chosen (the model's name appears in the status line,
which needs answers from the daemon).  Prints the median of ``--runs`` runs.

Without ``--host`` it starts its own daemon in a temporary ``LOCALLLM_HOME``
holding the tiny test model, and warms it with one request first.
Run: ``.venv/bin/python bench/tui_startup.py [--runs N] [--host URL]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import re
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

_ANSI = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def one_run(host: str, model_marker: str, env: dict[str, str]) -> tuple[float, float]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "localllm", "chat", "--host", host],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=REPO,
        close_fds=True,
    )
    os.close(slave)
    raw, prompt_at, model_at = b"", 0.0, 0.0
    try:
        while time.perf_counter() - start < 30 and not (prompt_at and model_at):
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                raw += os.read(master, 65536)
            except OSError:
                break
            text = _ANSI.sub(b"", raw)
            now = time.perf_counter() - start
            if not prompt_at and b"Enter send" in text:
                prompt_at = now
            if not model_at and model_marker.encode() in text:
                model_at = now
    finally:
        with contextlib.suppress(OSError):
            os.write(master, b"\x11")  # Ctrl+Q
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(master)
    if not prompt_at:
        raise RuntimeError("the prompt never appeared")
    return prompt_at, model_at


@contextlib.contextmanager
def own_daemon() -> Iterator[tuple[str, dict[str, str]]]:
    from tests.support.daemon import start_daemon
    from tests.support.models import add_tiny

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LOCALLLM_HOME"] = str(Path(tmp) / "home")
        add_tiny(Path(tmp), "tiny")
        with start_daemon(Path(tmp)) as daemon:
            import httpx

            httpx.post(
                daemon.url + "/api/generate", json={"model": "tiny"}, timeout=60, trust_env=False
            )  # warm: the model loaded
            yield daemon.url, daemon.env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--host", help="a running daemon (default: start one)")
    parser.add_argument("--model", default="tiny", help="text that shows the model was chosen")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.host:
            host, env = args.host, dict(os.environ)
        else:
            host, env = stack.enter_context(own_daemon())
        one_run(host, args.model, env)  # first run warms the file cache (.pyc, textual)
        runs = [one_run(host, args.model, env) for _ in range(args.runs)]
    prompt = statistics.median(r[0] for r in runs)
    model = statistics.median(r[1] for r in runs)
    print(f"localllm chat start-up, median of {args.runs} (80x24 pty, warm daemon):")
    print(f"  prompt drawn:  {prompt * 1000:.0f} ms")
    print(f"  model chosen:  {model * 1000:.0f} ms")


if __name__ == "__main__":
    main()
