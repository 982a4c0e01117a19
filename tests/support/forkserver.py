"""A fork server for the tests: ``python -m localllm ARGS`` as forks of one warm process.

Most of a daemon's start is importing FastAPI, pydantic and uvicorn: about
0.75 s of CPU, paid again by each of the suite's ~55 daemons and ~50 CLI runs,
on 2 cores that the suite keeps busy.  Each xdist worker keeps one server
process that has done those imports once; ``spawn`` hands it an argv, an
environment, a working folder and the three standard streams (passed as file
descriptors over a Unix socket), and it forks a child that runs
``localllm/__main__.py`` the way ``python -m localllm`` does.  The child is
its own process, with its pid, its signals and its exit status, so the tests
see what they saw before.  What a fork cannot show, a fresh interpreter's start
(autostart, the import boundary, the wheel's smoke test), is still tested with
real ``subprocess`` children.

The server forks only while it has no threads; a child resets the signal
handlers it inherited and replaces the environment before any of localllm's
code reads it (``config`` reads the environment at each use, never at import).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
# What ``localllm serve`` and the CLI commands import: done once, in the server.
WARM = (
    "localllm.cli.main",
    "localllm.server.app",
    "localllm.server.serve",
    "uvicorn",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.lifespan.on",
    "httpx",
    "localllm.api.client",
)
_HEAD = struct.Struct("<I")
_STATUS = struct.Struct("<i")
_PID = struct.Struct("<q")

# -- the server (its own process) ------------------------------------------------------


def _child(args: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> None:
    """In the fork: become ``python -m localllm *args`` and never return."""
    code: Any = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [str(REPO / "localllm" / "__main__.py"), *args]
        runpy.run_module("localllm", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # a child must report, then exit, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe must not change the status
                pass
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if not isinstance(code, int) and code is not None:
            print(code, file=sys.stderr)
        os._exit(status)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = conn.recv(n, socket.MSG_WAITALL)  # all n bytes, or the peer is gone
    if len(data) < n:
        raise ConnectionError("the other end of the fork server's socket went away")
    return data


def serve(path: str) -> None:
    """Accept spawn requests on ``path`` until stdin closes (the worker is gone)."""
    import importlib

    for name in WARM:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(sys.stdin, selectors.EVENT_READ)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection that asked for it
    while True:
        for key, _ in sel.select(timeout=0.02):
            if key.fileobj is sys.stdin:
                if not os.read(sys.stdin.fileno(), 4096):
                    return
                continue
            conn, _ = listener.accept()
            with_fds = socket.recv_fds(conn, _HEAD.size, 3)
            (size,), fds = _HEAD.unpack(with_fds[0]), with_fds[1]
            req = json.loads(_recv_exact(conn, size))
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                sel.close()
                listener.close()
                for other in waiting.values():
                    other.close()
                conn.close()
                _child(req["args"], req["env"], req["cwd"], fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(_PID.pack(pid))
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn_for = waiting.pop(pid, None)
            if conn_for is not None:
                code = os.waitstatus_to_exitcode(status)
                try:
                    conn_for.sendall(_STATUS.pack(code))
                except OSError:
                    pass  # the test stopped waiting for it
                conn_for.close()


# -- the client (in the pytest worker) ------------------------------------------------

_lock = threading.Lock()
_server: tuple[subprocess.Popen[bytes], str] | None = None


def _server_path() -> str:
    global _server
    with _lock:
        if _server is None or _server[0].poll() is not None:
            folder = tempfile.mkdtemp(prefix="localllm-fork-")
            path = os.path.join(folder, "s")
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.forkserver", path],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != b"ready":
                raise RuntimeError(f"the fork server did not start: {line!r}")
            atexit.register(_stop, proc, folder)
            _server = (proc, path)
        return _server[1]


def server_pid() -> int | None:
    """The fork server's pid, once started: a child of this worker that is not a test's."""
    return _server[0].pid if _server is not None else None


def _stop(proc: subprocess.Popen[bytes], folder: str) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    shutil.rmtree(folder, ignore_errors=True)  # the socket's folder


def _fd(stream: IO[Any] | int | None, default: int) -> int:
    if stream is None:
        return default
    return stream if isinstance(stream, int) else stream.fileno()


class Forked:
    """A forked ``localllm`` child, with the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int) -> None:
        self.args, self.pid, self._conn = args, pid, conn
        self.returncode: int | None = None
        # A test that never waits for its child must not leak the socket (a ResourceWarning,
        # an error under filterwarnings = error, raised wherever the collector runs).
        weakref.finalize(self, conn.close)

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            data = _recv_exact(self._conn, _STATUS.size)
        except (TimeoutError, BlockingIOError):
            return None
        self.returncode = _STATUS.unpack(data)[0]
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        # As Popen does: a child that has exited is not signalled, and one that exits
        # meanwhile (the server reaps it at once, so its pid is gone) is no error.
        if self.poll() is not None:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(
    args: list[str],
    env: dict[str, str],
    *,
    cwd: Path = REPO,
    stdin: IO[Any] | int | None = None,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
) -> Forked:
    """Start ``python -m localllm *args`` as a fork of the warm server."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(_server_path())
    fds = [_fd(stdin, 0), _fd(stdout, 1), _fd(stderr, 2)]
    body = json.dumps({"args": list(args), "env": env, "cwd": str(cwd)}).encode()
    socket.send_fds(conn, [_HEAD.pack(len(body))], fds)
    conn.sendall(body)
    (pid,) = _PID.unpack(_recv_exact(conn, _PID.size))
    return Forked(list(args), conn, pid)


def run(
    args: list[str],
    env: dict[str, str],
    *,
    cwd: Path = REPO,
    timeout: float | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(..., capture_output=True, text=True)`` for a forked command.

    Without ``input`` the command's stdin is empty (``/dev/null``).
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (os.open(os.devnull, os.O_RDONLY), -1)
    try:
        child = spawn(args, env, cwd=cwd, stdin=in_r, stdout=out_w, stderr=err_w)
    finally:
        for fd in (out_w, err_w, in_r):
            os.close(fd)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = memoryview(input.encode()) if input is not None else memoryview(b"")
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        if in_w >= 0:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                child.kill()
                child.wait()
                for key in list(sel.get_map().values()):
                    os.close(key.fd)
                raise subprocess.TimeoutExpired(args, timeout or 0)
            for key, _ in sel.select(left):
                if key.fd == in_w:
                    try:
                        pending = pending[os.write(in_w, pending[:65536]) :] if pending else pending
                    except BrokenPipeError:
                        pending = memoryview(b"")  # the command stopped reading: as run() does
                    if not pending:
                        sel.unregister(in_w)
                        os.close(in_w)
                    continue
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    code = child.wait(None if deadline is None else max(0.0, deadline - time.monotonic()) + 5)
    # As text=True reads it: universal newlines (a progress line's "\r" becomes "\n").
    text = [
        b"".join(chunks[fd]).decode().replace("\r\n", "\n").replace("\r", "\n")
        for fd in (out_r, err_r)
    ]
    return subprocess.CompletedProcess(args, code, text[0], text[1])


if __name__ == "__main__":
    serve(sys.argv[1])
