"""The daemon as its clients see it: connecting, reading answers and failures, autostart.

``http_kwargs`` is how every client connects.  Error answers become
``localllm.errors`` types chosen by status (and route, for 404s), with the
``{"error": ...}`` text as the message; an ``{"error": ...}`` line in the
middle of a stream raises too.  ``transport_error`` turns httpx's transport
errors (refused, reset, cut mid-stream, timed out) into one-line
``LocalLLMError``s, so the CLI prints ``Error: ...`` rather than a traceback.
``ensure_daemon()`` starts ``localllm serve`` in the background when nothing
answers on a local address, waits for it and says so on stderr.
"""

from __future__ import annotations

import atexit
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit

from localllm import config, paths
from localllm.api._httpx import httpx
from localllm.api.wire import JSONObject
from localllm.errors import (
    BlobNotFound,
    Forbidden,
    InvalidRequest,
    LocalLLMError,
    ModelNotFound,
    NotFound,
    ServerBusy,
)

# Loads can take minutes and streams may pause: only connecting is bounded.
DEFAULT_TIMEOUT = httpx.Timeout(None, connect=5.0)
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0")


class DaemonUnreachable(LocalLLMError):
    """Nothing answers at the daemon's address (and it could not be started)."""

    status = 503


class DaemonConnectionLost(LocalLLMError):
    """The connection broke after it was made: reset, or closed in the middle of an answer."""

    status = 503


class DaemonTimeout(LocalLLMError):
    """The daemon took longer to answer than the client was willing to wait."""

    status = 504


class HttpSettings(TypedDict):
    """The ``httpx.Client``/``AsyncClient`` keyword arguments for talking to the daemon."""

    base_url: str
    timeout: httpx.Timeout | float
    headers: dict[str, str]
    trust_env: bool
    verify: ssl.SSLContext | bool


def http_kwargs(base_url: str) -> HttpSettings:
    """The ``httpx.Client``/``AsyncClient`` arguments for talking to the daemon."""
    key = config.API_KEY.get()
    # trust_env=False: a proxy from the environment must not carry loopback
    # traffic; verify=False on plain http skips loading CA certificates at start.
    return {
        "base_url": base_url,
        "timeout": DEFAULT_TIMEOUT,
        "headers": {"Authorization": f"Bearer {key}"} if key else {},
        "trust_env": False,
        "verify": False if base_url.startswith("http://") else _tls_context(),
    }


def _tls_context() -> ssl.SSLContext:
    # The process's one context (localllm/tls.py): certifi's, the system's and
    # LOCALLLM_TLS_CA's authorities; imported here only, so plain http pays nothing.
    from localllm import tls

    return tls.context()


def tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind an httpx error (a certificate not trusted, no TLS there)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _tls_advice(base_url: str, err: ssl.SSLError) -> str:
    if isinstance(err, ssl.SSLCertVerificationError):
        return (
            f"the certificate of localllm at {base_url} is not trusted "
            f"({err.verify_message or err.reason}): set LOCALLLM_TLS_CA to the CA "
            "certificate that signed it"
        )
    return (
        f"TLS with localllm at {base_url} failed ({err.reason or err}); "
        "does it serve HTTPS? (without LOCALLLM_TLS_CERT it serves plain http://)"
    )


def transport_error(base_url: str, exc: httpx.RequestError) -> LocalLLMError:
    """The user's one-line error for an httpx transport error talking to ``base_url``."""
    name = exc.__class__.__name__
    if (tls_err := tls_failure(exc)) is not None:
        return DaemonUnreachable(_tls_advice(base_url, tls_err))
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return DaemonUnreachable(
            f"could not connect to localllm at {base_url} ({name}); "
            "is it running? Start it with 'localllm serve'"
        )
    if isinstance(exc, httpx.TimeoutException):
        return DaemonTimeout(f"localllm at {base_url} did not answer in time ({name})")
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.DecodingError):
        # The TUI shows this text under a cut reply: it says what happened first.
        return DaemonConnectionLost(
            f"connection to the daemon lost ({name}) at {base_url}; is it still running?"
        )
    # A bad address (unsupported scheme), a proxy refusing, ...: httpx's own words.
    detail = (str(exc).strip().splitlines() or [name])[0]
    return DaemonUnreachable(f"could not talk to localllm at {base_url}: {detail}")


@contextmanager
def transport_errors(base_url: str) -> Iterator[None]:
    """httpx's transport errors, wherever they surface (even mid-stream), as ours."""
    try:
        yield
    except httpx.RequestError as exc:
        raise transport_error(base_url, exc) from exc


# -- reading answers -------------------------------------------------------------
def error_for(status: int, message: str, path: str = "") -> LocalLLMError:
    """The ``localllm.errors`` exception for an HTTP error answer."""
    if status == 400:
        return InvalidRequest(message)
    if status == 403:
        return Forbidden(message)
    if status == 404:
        if path.startswith("/api/blobs"):
            return BlobNotFound(message)
        return ModelNotFound(message) if path.startswith("/api/") else NotFound(message)
    if status == 503:
        return ServerBusy(message)
    return LocalLLMError(message, status=status)


def _error_text(body: bytes, status: int) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if isinstance(value, dict):
        err = value.get("error")
        if isinstance(err, dict):  # OpenAI's shape under /v1/
            err = err.get("message")
        if isinstance(err, str) and err:
            return err
    text = body.decode("utf-8", "replace").strip()
    return text or f"HTTP {status}"


def raise_for(resp: httpx.Response, body: bytes) -> None:
    """Raise the error an answer with status >= 400 stands for."""
    if resp.status_code >= 400:
        raise error_for(resp.status_code, _error_text(body, resp.status_code), resp.url.path)


def answer(resp: httpx.Response) -> Any:
    """The decoded JSON of a whole answer (None for an empty body)."""
    raise_for(resp, resp.content)
    if not resp.content:
        return None
    try:
        return json.loads(resp.content)
    except ValueError:
        # Something else answers at this address (a web server, a proxy page).
        raise LocalLLMError(f"not a JSON answer from {resp.url}: {resp.text[:200]!r}") from None


def json_object(text: str) -> dict[str, Any]:
    """One stream line's JSON object; ValueError naming the line when it is not one."""
    try:
        obj = json.loads(text)
    except ValueError:
        raise ValueError(f"malformed stream line: {text[:200]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"unexpected stream item: {text[:200]!r}")
    return obj


def stream_item(line: str) -> JSONObject | None:
    """One NDJSON line of a stream (None for a blank one); an ``{"error": ...}`` line raises."""
    if not line.strip():
        return None
    try:
        obj = json_object(line)
    except ValueError as exc:
        raise LocalLLMError(f"{exc} (from the daemon)") from None
    if "error" in obj:
        raise LocalLLMError(str(obj["error"]))
    return obj


# -- starting the daemon -------------------------------------------------------
def is_local_url(base_url: str) -> bool:
    return (urlsplit(base_url).hostname or "") in _LOCAL_HOSTS


def daemon_alive(base_url: str | None = None, timeout: float = 1.0) -> bool:
    """Whether a daemon answers at ``base_url``; a TLS failure raises (something answers,
    and starting another daemon there would not help)."""
    url = base_url or config.client_base_url()
    try:
        settings = http_kwargs(url)
        settings["timeout"] = timeout
        with httpx.Client(**settings) as http:
            return http.get("/").status_code == 200
    except httpx.RequestError as exc:
        if tls_failure(exc) is not None:
            raise transport_error(url, exc) from exc
        return False
    except httpx.HTTPError:
        return False


_DETACHED: list[subprocess.Popen[bytes]] = []


@atexit.register
def _release_detached() -> None:
    # A daemon we started outlives this command on purpose: mark it as let go, so
    # Popen's finaliser does not report it as a process left running by mistake.
    for proc in _DETACHED:
        if proc.poll() is None:
            proc.returncode = 0


def ensure_daemon(base_url: str | None = None, *, wait: float = 30.0) -> bool:
    """Make sure a daemon answers at ``base_url``; start one if needed.

    Returns True when this call started it.  Only local addresses are started;
    for a remote one the failure is reported as ``DaemonUnreachable``.  On POSIX the
    daemon is nobody's child (``children.spawn_detached``): ``localllm launch`` goes
    on to ``exec`` an agent, which must not inherit it.
    """
    url = base_url or config.client_base_url()
    if daemon_alive(url):
        return False
    if not is_local_url(url):
        raise DaemonUnreachable(f"could not connect to localllm at {url}")
    log_path = paths.logs() / "server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"Starting localllm daemon at {url} (log: {log_path})", file=sys.stderr)
    running = _spawn_serve(url, log_path)
    deadline = time.monotonic() + wait
    exited = False
    while time.monotonic() < deadline:
        if daemon_alive(url, timeout=0.5):
            return True
        if not exited and (exited := not running()):
            # Another command may have started a daemon at the same moment (ours then
            # finds the port taken): give that one a few seconds to answer.
            deadline = min(deadline, time.monotonic() + 5.0)
        time.sleep(0.1)
    if exited:
        raise LocalLLMError(f"the daemon exited during start-up:\n{_tail(log_path)}")
    raise DaemonUnreachable(
        f"the daemon did not answer at {url} within {wait:.0f}s; see {log_path}"
    )


def _spawn_serve(url: str, log_path: Path) -> Callable[[], bool]:
    """Start ``localllm serve`` for ``url`` in the background; a check that it still runs."""
    from localllm import children

    # The daemon outlives the command that started it: no death signal.
    # With its scheme when https: a daemon without a certificate then says so and exits.
    env = {"LOCALLLM_HOST": url if url.startswith("https://") else urlsplit(url).netloc}
    if sys.platform != "win32":
        pid = children.spawn_detached("localllm", "serve", env=env, log=log_path)
        return lambda: children.alive(pid)
    with open(log_path, "ab") as log:
        proc = children.spawn(
            "localllm",
            "serve",
            env=env,
            dies_with_parent=False,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            close_fds=True,
            creationflags=subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP,
        )
    # It runs on after this command by design; held here, its Popen is never collected
    # while the process lives (which Python reports as a leak).
    _DETACHED.append(proc)
    return lambda: proc.poll() is None


def _tail(path: Path, lines: int = 10) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
