"""hardware.rpc: the daemon's own client for ggml RPC workers (no native code, timeouts)."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from localllm.hardware.rpc import (
    CMD_HELLO,
    CONN_CAPS_SIZE,
    endpoint_of,
    query,
    reachable,
    split_endpoint,
)
from tests.rpcworker import free_port, start_worker


def test_ready_worker_reports_its_device_and_memory(rpc_backends: Path, tmp_path: Path) -> None:
    with start_worker(rpc_backends, tmp_path) as w:
        st = query(w.endpoint)
        assert st.ready and st.version.startswith("7.") and st.error == ""
        (dev,) = st.devices
        assert dev.name == w.device and dev.total > 0 and 0 < dev.free <= dev.total
        assert reachable(w.endpoint) == ""
        # The worker prints what it serves before it listens.
        assert f"localllm worker on {w.endpoint}" in w.output()


def test_a_worker_serving_another_client_is_busy_not_down(rpc_backends: Path,
                                                          tmp_path: Path) -> None:
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
