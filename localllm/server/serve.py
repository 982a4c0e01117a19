"""Run the daemon: bind ``LOCALLLM_HOST``, write the pid file, prune the store, serve with uvicorn.

The listening socket is bound here rather than by uvicorn so that "address
already in use" becomes one clear error message instead of a log traceback.
So are the certificate (``tls_files.py``: HTTPS with ``LOCALLLM_TLS_CERT`` and
``LOCALLLM_TLS_KEY``) and the keys file (``apikeys.py``) checked before binding:
a bad one stops the start with one sentence and a non-zero exit.

Shutdown: the first SIGTERM/SIGINT starts a drain — the socket stays open so
new requests get a clear 503 ``server is shutting down`` instead of a refused
connection, while requests in flight (streams included) run to their end for
up to ``LOCALLLM_SHUTDOWN_GRACE``.  Then uvicorn stops, the lifespan hooks stop
the runners, and the process exits 0.  A second signal kills the runners and
exits at once.  Runners also end on their own when the daemon dies without
any of this (SIGKILL): their stdin closes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, TypedDict

from localllm import config, paths
from localllm.errors import LocalLLMError
from localllm.server import apikeys, reprobe, tls_files
from localllm.server.security import is_loopback_bind

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

SWITCH_INTERVAL = 0.001
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


_pid_lock: IO[str] | None = None  # held open for the daemon's life (cli/tell_daemon.py)


def _write_pid() -> Path:
    global _pid_lock
    path = pid_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")
    # A shared lock while the daemon lives: whoever reads the file can tell a live pid
    # from a stale one, whose number another program may have by now.
    with contextlib.suppress(OSError, ImportError):
        import fcntl

        _pid_lock = open(path)  # kept open until the process ends
        fcntl.flock(_pid_lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    return path


def warn_if_exposed(host: str) -> bool:
    """Shout when the API is reachable from other machines with no key; True if it did."""
    if is_loopback_bind(host):
        return False
    if config.API_KEY.get() or config.API_KEYS_FILE.get():
        if not tls_files.configured():
            # Keys and prompts cross the network as they are: say so, once, quietly.
            log.warning("listening on %s over plain HTTP: API keys travel unencrypted", host)
        return False
    bar = "!" * 78
    text = (
        f"{bar}\n"
        f"WARNING: listening on {host}, which other machines can reach, and\n"
        f"LOCALLLM_API_KEY is not set: anyone on the network can use, pull and\n"
        f"delete models. Set LOCALLLM_API_KEY, or bind to 127.0.0.1.\n{bar}"
    )
    log.warning("listening on non-loopback %s without LOCALLLM_API_KEY", host)
    print(text, file=sys.stderr, flush=True)
    return True


def run() -> int:
    """Serve until interrupted; returns the process exit status."""

    from localllm.server.app import create_app
    from localllm.server.logs import setup_logging
    from localllm.store.local import Store
    from localllm.template.jinja_version import warn_if_unsafe_jinja

    setup_logging()
    host, port = config.HOST.get()
    tls = tls_files.check()
    if keys_file := config.API_KEYS_FILE.get():
        apikeys.check_file(keys_file)
    sock = _bind(host, port)
    warn_if_exposed(host)
    warn_if_unsafe_jinja()  # templates in GGUFs are untrusted: jinja2 < 3.1.6 is refused
    store = Store()
    try:
        removed = store.prune()
        if removed:
            log.info("removed %d unused blob(s)", len(removed))
    except Exception as exc:  # a damaged store must not keep the daemon down
        log.warning("skipping blob clean-up: %s", exc)

    app = create_app(store, bind_host=host)
    pid_path = _write_pid()
    reprobe.install()
    server = _make_server(app, pid_path)
    scheme = "https" if tls else "http"
    log.info(
        "localllm %s listening on %s://%s:%d (models: %s)",
        _version(),
        scheme,
        host,
        port,
        store.root,
    )
    for ours, theirs in config.ollama_fallbacks():
        log.info("%s is unset: using %s", ours, theirs)
    for theirs, why in config.ollama_ignored():
        log.info("%s is not used: %s", theirs, why)
    threading.Thread(target=report_hardware, name="hardware-report", daemon=True).start()
    # Everything imported and built so far lives as long as the daemon: out of the
    # collector's full passes, each of which walked it (62,000 objects, 19 ms with the
    # lock held, whichever thread's allocations set it off).
    gc.collect()
    gc.freeze()
    # A worker thread running Python (rendering, parsing, normalising) holds the lock for
    # the switch interval whenever the loop gives it up for a system call (epoll, send,
    # recv), so each of a request's calls cost up to 5 ms: /health took 70-100 ms beside
    # one busy thread.  At 1 ms it takes 15-20.
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        _remove_pid(pid_path)
    return 0


def report_hardware() -> None:
    """Detect devices once at start (warming the cache) and log what needs attention.

    A GPU without its plugin: in a terminal, the one line that names the command
    that fixes it, at most once a day (``api/hint.py``: ``run`` and ``chat`` share
    the day); in the log, the longer hint, once per data folder (a marker file
    remembers), so it is seen but not nagged.  A daemon started in the background
    by a client has no terminal: that client shows the line.
    """
    from localllm import paths
    from localllm.api.hint import take
    from localllm.backends.advice import gpu_line, wanted
    from localllm.hardware.detect import detect

    try:
        hw = detect()
    except Exception as exc:  # a report, never a reason to stop serving
        log.warning("hardware detection failed: %s", exc)
        return
    names = ", ".join(f"{d.name} ({d.library})" for d in hw.devices)
    log.info("devices: %s", names)
    for p in hw.plugins:
        if not p.get("loaded"):
            log.warning("backend plugin %s did not load: %s", p.get("file"), p.get("error"))
    for w in hw.workers:
        log.info("RPC worker %s: %s%s", w.endpoint, w.state, f" ({w.error})" if w.error else "")
    line = gpu_line(hw)
    told = bool(line) and sys.stderr.isatty() and take()
    if told:
        print(line, file=sys.stderr, flush=True)
    for want in wanted(hw):
        if not want.backend:
            log.warning("%s", want.hint)
            continue
        marker = paths.run_dir() / f"hinted-{want.backend.name}"
        if marker.exists() or told:
            continue
        log.warning("%s", want.hint)
        with contextlib.suppress(OSError):
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()


def _make_server(app: FastAPI, pid_path: Path) -> uvicorn.Server:
    """A uvicorn server whose signal handling drains first (see the module docstring)."""
    import uvicorn  # imported by run() already: the daemon's, not every importer's, cost

    lifecycle = app.state.lifecycle
    grace = config.SHUTDOWN_GRACE.get()

    class DrainingServer(uvicorn.Server):
        announced = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Runs as a signal handler: only set flags here; on_tick does the rest.
            if not lifecycle.begin_drain(grace):
                _force_exit(app, pid_path, sig)

        async def on_tick(self, counter: int) -> bool:
            # A SIGHUP from `localllm backends ...` (server/reprobe.py).
            reprobe.poll(getattr(app.state, "scheduler", None))
            if lifecycle.draining and not self.announced:
                self.announced = True
                log.info(
                    "shutting down: waiting up to %gs for %d request(s) in flight",
                    grace,
                    lifecycle.in_flight,
                )
            if lifecycle.drained():
                if lifecycle.in_flight > 0:
                    log.warning("grace period over: cancelling %d request(s)", lifecycle.in_flight)
                self.should_exit = True
            return bool(await super().on_tick(counter))

    return DrainingServer(uvicorn.Config(app, **uvicorn_settings()))


# A connection with no request in flight is closed after this long: idle keep-alive
# ones (uvicorn's timeout_keep_alive) and, via ``_H11Protocol``, new ones whose
# request headers have not all arrived.  A client stalled half-way through a body
# is the route's to drop (``routes_models.BODY_READ_TIMEOUT``).
KEEP_ALIVE_TIMEOUT = 30


def _h11_protocol() -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11(H11Protocol):
        """uvicorn arms its idle timer only after a response, and disarms it on any
        data; also arm it on connect and while request headers are incomplete, so a
        client that never finishes its headers (or trickles them) is dropped."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_timeout()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._arm_header_timeout()

        def _arm_header_timeout(self) -> None:
            if (
                self.conn.their_state is h11.IDLE
                and self.timeout_keep_alive_task is None
                and not self.transport.is_closing()
            ):
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )

    return HeaderTimeoutH11


def _uvicorn_level(debug: int) -> str:
    if debug >= 2:
        return "trace"
    return "debug" if debug == 1 else "error" if debug <= -2 else "warning"


class UvicornSettings(TypedDict):
    """The ``uvicorn.Config`` keyword arguments the daemon sets."""

    log_level: str
    log_config: None
    access_log: bool
    timeout_graceful_shutdown: int
    timeout_keep_alive: int
    http: type
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_ciphers: str


def uvicorn_settings() -> UvicornSettings:
    """``uvicorn.Config`` keyword arguments, shared with the tests' live servers."""
    return {
        # LOCALLLM_DEBUG=2 is uvicorn's "trace": every connection event and ASGI message.
        "log_level": _uvicorn_level(config.DEBUG.get()),
        "log_config": None,
        "access_log": False,  # RequestMiddleware writes the access log, with request ids
        # The drain already waited; this only bounds closing what is left.
        "timeout_graceful_shutdown": 2,
        "timeout_keep_alive": KEEP_ALIVE_TIMEOUT,
        "http": _h11_protocol(),
        # HTTPS when both are set (run() checked them first: tls_files.py).
        "ssl_certfile": tls.cert if (tls := tls_files.configured()) else None,
        "ssl_keyfile": tls.key if tls else None,
        # uvicorn's default list, "TLSv1", keeps only TLS 1.0's suites (CBC with SHA-1)
        # for TLS 1.2 clients; empty leaves Python's: ECDHE with AES-GCM or ChaCha20.
        "ssl_ciphers": "",
    }


def _force_exit(app: FastAPI, pid_path: Path, sig: int) -> None:
    """Second signal: end the runners now (they would follow anyway) and leave."""
    for model in app.state.scheduler.loaded():
        kill = getattr(model.runner, "kill", None)
        if kill is not None:
            kill()
    _remove_pid(pid_path)
    os.write(2, b"second signal: exiting now\n")
    os._exit(128 + sig)


def _remove_pid(pid_path: Path) -> None:
    try:
        if pid_path.read_text().strip() == str(os.getpid()):
            pid_path.unlink()
    except OSError:
        pass


def _version() -> str:
    from localllm import __version__

    return __version__
