"""Run the daemon: bind ``LOCALLLM_HOST``, write the pid file, prune the store, serve with uvicorn.

The listening socket is bound here rather than by uvicorn so that "address
already in use" becomes one clear error message instead of a log traceback.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import sys
from pathlib import Path

from localllm import config, paths
from localllm.errors import LocalLLMError

log = logging.getLogger("localllm.serve")


def pid_file() -> Path:
    return paths.run_dir() / "localllm.pid"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets
    # whose proto says TCP, and without it every keep-alive answer waits ~40 ms
    # for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise LocalLLMError(f"listen tcp {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _write_pid() -> Path:
    path = pid_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")
    return path


def _setup_logging() -> None:
    level = logging.DEBUG if config.DEBUG.get() else logging.INFO
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def run() -> int:
    """Serve until interrupted; returns the process exit status."""
    import uvicorn

    from localllm.server.app import create_app
    from localllm.store.local import Store

    _setup_logging()
    host, port = config.HOST.get()
    sock = _bind(host, port)
    store = Store()
    try:
        removed = store.prune()
        if removed:
            log.info("removed %d unused blob(s)", len(removed))
    except Exception as exc:  # a damaged store must not keep the daemon down
        log.warning("skipping blob clean-up: %s", exc)

    app = create_app(store, bind_host=host)
    grace = config.SHUTDOWN_GRACE.get()
    server = uvicorn.Server(uvicorn.Config(
        app, log_level="debug" if config.DEBUG.get() else "warning",
        access_log=config.DEBUG.get(),
        timeout_graceful_shutdown=None if math.isinf(grace) else int(grace),
    ))
    # uvicorn re-raises the SIGTERM it caught once it has shut down; make that a
    # normal exit so the pid file below is removed.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    pid_path = _write_pid()
    log.info("localllm %s listening on %s:%d (models: %s)", _version(), host, port, store.root)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        try:
            if pid_path.read_text().strip() == str(os.getpid()):
                pid_path.unlink()
        except OSError:
            pass
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _version() -> str:
    from localllm import __version__

    return __version__
