"""What a ggml RPC worker offers, asked over its own wire protocol from Python.

The daemon plans with remote devices but never loads the native module, and
ggml's own client aborts the process when a server is down or busy.  So the
daemon speaks the three read-only commands it needs itself, with timeouts:
HELLO (protocol version), DEVICE_COUNT and GET_DEVICE_MEMORY.  A ggml RPC
server serves one client at a time, so a worker that a runner is using
accepts the connection but does not answer: that reads as ``busy``.

``timeout`` bounds a whole query — name lookup, connect and every command —
not each read: the scheduler asks workers while it holds its load lock, and a
worker that answers one byte at a time, with a fresh per-read timeout for
each, would hold that lock for minutes.  A worker that has started to answer
but does not finish in time is ``down`` (too slow), not ``busy``.

Wire format (ggml-rpc.cpp): request ``cmd:u8 | size:u64 | data``, response
``size:u64 | data``, little-endian.  Device names follow the engine's
``stable_names``: ``RPC[host:port]``, then ``RPC[host:port]#k``.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24
PROTO_MAJOR = 7  # the pinned llama.cpp's RPC_PROTO_MAJOR_VERSION
DEFAULT_PORT = 50052


@dataclass(frozen=True)
class RemoteDevice:
    name: str  # "RPC[host:port]" or "RPC[host:port]#k"
    free: int
    total: int


@dataclass(frozen=True)
class WorkerStatus:
    endpoint: str
    state: str  # "ready" | "busy" | "down" | "incompatible"
    version: str = ""
    devices: tuple[RemoteDevice, ...] = field(default=())
    error: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` (``[v6]:port`` too) -> (host, port); ValueError when malformed."""
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"RPC worker {endpoint!r} must look like host:port")
    p = int(port)
    if not 0 < p < 65536:
        raise ValueError(f"RPC worker {endpoint!r}: port out of range")
    return host.strip("[]"), p


def device_name(endpoint: str, k: int) -> str:
    return f"RPC[{endpoint}]" if k == 0 else f"RPC[{endpoint}]#{k}"


class TooSlow(ConnectionError):
    """The worker started to answer but did not finish within the query's time."""


class _Deadline:
    """The one time limit of a whole query; ``left`` raises once it has passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer within {self.seconds:g}s")
        return remaining


def _resolve(host: str, port: int, deadline: _Deadline) -> list[tuple[int, str, int]]:
    """(family, address, port) of ``host``; a lookup that outlives the deadline is left
    to finish in a daemon thread (getaddrinfo has no timeout of its own)."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [(socket.AF_INET6 if addr.version == 6 else socket.AF_INET, host, port)]
    found: list[tuple[int, str, int]] = []
    failed: list[OSError] = []

    def lookup() -> None:
        try:
            for family, _, _, _, sockaddr in socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            ):
                found.append((family, str(sockaddr[0]), port))
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=lookup, name=f"resolve {host}", daemon=True)
    thread.start()
    thread.join(deadline.left())
    if thread.is_alive():
        raise TimeoutError(f"looking up {host} took more than {deadline.seconds:g}s")
    if failed:
        raise failed[0]
    return found


def _connect(host: str, port: int, deadline: _Deadline) -> socket.socket:
    last: OSError = OSError(f"no address for {host}")
    for family, address, p in _resolve(host, port, deadline):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(deadline.left())
            sock.connect((address, p))
            return sock
        except OSError as exc:
            sock.close()
            last = exc
            if isinstance(exc, TimeoutError):
                break  # the deadline, not this address, is what ran out
    raise last


def _recv(sock: socket.socket, n: int, deadline: _Deadline) -> bytes:
    out = b""
    while len(out) < n:
        try:
            sock.settimeout(deadline.left())
            chunk = sock.recv(n - len(out))
        except TimeoutError:
            if out:
                raise TooSlow(
                    f"too slow: the worker sent {len(out)} of {n} bytes of a reply "
                    f"in {deadline.seconds:g}s"
                ) from None
            raise
        if not chunk:
            raise ConnectionError("the worker closed the connection")
        out += chunk
    return out


def _call(sock: socket.socket, cmd: int, payload: bytes, want: int, deadline: _Deadline) -> bytes:
    sock.settimeout(deadline.left())
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv(sock, 8, deadline))
    if size != want:
        raise ConnectionError(f"unexpected reply size {size} to command {cmd}")
    try:
        return _recv(sock, want, deadline)
    except TimeoutError:
        raise TooSlow(
            f"too slow: the worker sent a reply's header but not the reply in {deadline.seconds:g}s"
        ) from None


def query(endpoint: str, timeout: float = 2.0) -> WorkerStatus:
    """Connect, handshake and read the worker's devices, all within ``timeout``
    seconds; never raises."""
    deadline = _Deadline(timeout)
    try:
        host, port = split_endpoint(endpoint)
    except ValueError as exc:
        return WorkerStatus(endpoint, "down", error=str(exc))
    try:
        sock = _connect(host, port, deadline)
    except OSError as exc:
        return WorkerStatus(endpoint, "down", error=f"cannot connect: {exc}")
    with sock:
        try:
            hello = _call(sock, CMD_HELLO, bytes(CONN_CAPS_SIZE), 4 + CONN_CAPS_SIZE, deadline)
        except TimeoutError:
            return WorkerStatus(
                endpoint, "busy", error="connected, but it is serving another client"
            )
        except (OSError, ConnectionError) as exc:
            return WorkerStatus(endpoint, "down", error=f"handshake failed: {exc}")
        major, minor, patch = hello[0], hello[1], hello[2]
        version = f"{major}.{minor}.{patch}"
        if major != PROTO_MAJOR:
            return WorkerStatus(
                endpoint,
                "incompatible",
                version,
                error=f"RPC protocol {version}, this build speaks "
                f"{PROTO_MAJOR}.x: run the same localllm version there",
            )
        try:
            (count,) = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4, deadline))
            devs = []
            for k in range(min(count, 16)):
                free, total = struct.unpack(
                    "<QQ", _call(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", k), 16, deadline)
                )
                devs.append(RemoteDevice(device_name(endpoint, k), free, total))
        except (OSError, ConnectionError) as exc:
            return WorkerStatus(endpoint, "down", version, error=f"query failed: {exc}")
    return WorkerStatus(endpoint, "ready", version, tuple(devs))


def endpoint_of(device_name: str) -> str | None:
    """``"RPC[host:port]#1"`` -> ``"host:port"``; None for a local device."""
    if not device_name.startswith("RPC[") or "]" not in device_name:
        return None
    return device_name[4 : device_name.index("]")]


def reachable(endpoint: str, timeout: float = 1.0) -> str:
    """ "" when a TCP connection to ``endpoint`` opens within ``timeout`` (name lookup
    included), else why not (cheap; no handshake)."""
    try:
        host, port = split_endpoint(endpoint)
        with _connect(host, port, _Deadline(timeout)):
            return ""
    except (OSError, ValueError) as exc:
        return str(exc)
