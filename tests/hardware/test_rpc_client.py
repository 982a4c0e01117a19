"""hardware.rpc: the daemon's own client for ggml RPC workers (no native code, timeouts)."""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from localllm.hardware.rpc import (
    CMD_HELLO,
    CONN_CAPS_SIZE,
    PROTO_MAJOR,
    endpoint_of,
    query,
    reachable,
    split_endpoint,
)
from tests.support.rpcworker import free_port, start_worker


def test_ready_worker_reports_its_device_and_memory(rpc_backends: Path, tmp_path: Path) -> None:
    with start_worker(rpc_backends, tmp_path) as w:
        st = query(w.endpoint)
        assert st.ready and st.version.startswith("7.") and st.error == ""
        (dev,) = st.devices
        assert dev.name == w.device and dev.total > 0 and 0 < dev.free <= dev.total
        assert reachable(w.endpoint) == ""
        # The worker prints what it serves before it listens.
        assert f"localllm worker on {w.endpoint}" in w.output()


def test_a_worker_serving_another_client_is_busy_not_down(
    rpc_backends: Path, tmp_path: Path
) -> None:
    with start_worker(rpc_backends, tmp_path) as w:
        host, port = split_endpoint(w.endpoint)
        with socket.create_connection((host, port)) as held:
            held.sendall(struct.pack("<BQ", CMD_HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
            held.recv(8 + 4 + CONN_CAPS_SIZE)
            started = time.monotonic()
            st = query(w.endpoint, timeout=0.5)
            assert st.state == "busy" and "another client" in st.error
            assert time.monotonic() - started < 3
        # Once that client leaves, the worker answers again.
        deadline = time.monotonic() + 5
        while not query(w.endpoint).ready:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_down_and_malformed_endpoints() -> None:
    dead = f"127.0.0.1:{free_port()}"
    st = query(dead, timeout=0.5)
    assert st.state == "down" and "cannot connect" in st.error
    assert reachable(dead, 0.5) != ""
    assert query("no-port").state == "down"
    with pytest.raises(ValueError):
        split_endpoint("host:99999")
    assert split_endpoint("[::1]:50052") == ("::1", 50052)


def test_a_server_that_is_not_ggml_rpc_is_down() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        ep = f"127.0.0.1:{srv.getsockname()[1]}"

        import threading

        def answer() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        t = threading.Thread(target=answer)
        t.start()
        st = query(ep, timeout=1.0)
        t.join()
    assert st.state == "down" and "handshake failed" in st.error


def test_endpoint_of_device_names() -> None:
    assert endpoint_of("RPC[10.0.0.2:50052]") == "10.0.0.2:50052"
    assert endpoint_of("RPC[10.0.0.2:50052]#1") == "10.0.0.2:50052"
    assert endpoint_of("CUDA0") is None


# -- a whole query has one time limit --------------------------------------------------


def _trickling_worker(
    reply: bytes, interval: float, stop_after: float
) -> tuple[str, threading.Thread, threading.Event]:
    """A fake ggml RPC worker that reads each command and answers ``reply`` one byte per
    ``interval`` seconds, for at most ``stop_after`` seconds (so a test on code that
    waits per read ends too, and fails, instead of running for minutes)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                t0 = time.monotonic()
                conn.recv(64)
                for byte in reply:
                    if stop.wait(interval) or time.monotonic() - t0 > stop_after:
                        return
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return f"127.0.0.1:{srv.getsockname()[1]}", t, stop


def _hello_reply() -> bytes:
    body = bytes([PROTO_MAJOR, 0, 0, 0]) + bytes(CONN_CAPS_SIZE)
    return struct.pack("<Q", len(body)) + body


def test_a_worker_that_answers_byte_by_byte_is_bounded_in_total() -> None:
    # 36 bytes of HELLO reply at one byte per 0.5 s: 18 s with a fresh 2 s per read
    # (and minutes more for a device list); the query's 2 s is the whole query.
    ep, thread, stop = _trickling_worker(_hello_reply(), 0.5, stop_after=12.0)
    t0 = time.monotonic()
    st = query(ep, timeout=2.0)
    took = time.monotonic() - t0
    stop.set()
    thread.join(5)
    assert took < 3.0, f"the query took {took:.1f}s"
    assert st.state == "down" and re.search(
        r"too slow: the worker sent \d+ of 8 bytes of a "
        r"reply in 2s",
        st.error,
    ), st.error


def test_a_silent_worker_is_still_busy_within_the_limit() -> None:
    ep, thread, stop = _trickling_worker(_hello_reply(), 30.0, stop_after=30.0)
    t0 = time.monotonic()
    st = query(ep, timeout=1.0)
    assert time.monotonic() - t0 < 2.0
    stop.set()
    thread.join(5)
    assert st.state == "busy"


def test_a_name_that_never_resolves_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # getaddrinfo has no timeout of its own (a dead DNS server takes 5 s per try).
    release = threading.Event()

    def hanging_lookup(*args: object, **kwargs: object) -> list[object]:
        release.wait(30)
        raise OSError("released")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_lookup)
    t0 = time.monotonic()
    st = query("gpu-box.example:50052", timeout=0.5)
    assert time.monotonic() - t0 < 1.5
    assert st.state == "down" and "looking up gpu-box.example" in st.error
    t0 = time.monotonic()
    assert "looking up" in reachable("gpu-box.example:50052", 0.5)
    assert time.monotonic() - t0 < 1.5
    release.set()
