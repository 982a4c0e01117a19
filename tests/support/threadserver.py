"""Serving a test stand-in from a thread: the start and stop every stub repeats."""

from __future__ import annotations

import socketserver
import threading


def serve_in_thread(server: socketserver.ThreadingMixIn) -> None:
    """Serve ``server`` from a daemon thread, each connection in a daemon thread of its own."""
    server.daemon_threads = True
    assert isinstance(server, socketserver.BaseServer)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()


def stop_server(server: socketserver.BaseServer | None) -> None:
    """Stop serving and close the listening socket (nothing when never started)."""
    if server is not None:
        server.shutdown()
        server.server_close()
