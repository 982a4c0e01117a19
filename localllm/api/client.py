"""The one HTTP client of the daemon, used by the CLI and the TUI (sync and async).

Responses come back as plain JSON values (dicts), streams as iterators of
NDJSON objects.  Error answers become ``localllm.errors`` types chosen by
status (and route, for 404s): the ``{"error": ...}`` text is the message.  An
``{"error": ...}`` line in the middle of a stream raises too.

``ensure_daemon()`` starts ``localllm serve`` in the background when nothing
answers on a local address; clients built with ``autostart=True`` call it on
their first connection failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localllm import config, paths
from localllm.api._httpx import httpx
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


def _raise_for(resp: httpx.Response, body: bytes) -> None:
    if resp.status_code >= 400:
        raise error_for(resp.status_code, _error_text(body, resp.status_code), resp.url.path)


def _stream_item(line: str) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        raise LocalLLMError(f"malformed stream line from daemon: {line[:200]!r}") from None
    if not isinstance(obj, dict):
        raise LocalLLMError(f"unexpected stream item from daemon: {line[:200]!r}")
    if "error" in obj:
        raise LocalLLMError(str(obj["error"]))
    return obj


def _headers() -> dict[str, str]:
    key = config.API_KEY.get()
    return {"Authorization": f"Bearer {key}"} if key else {}


def _http_kwargs(base_url: str) -> dict[str, Any]:
    # trust_env=False: a proxy from the environment must not carry loopback
    # traffic; verify=False on plain http skips loading CA certificates at start.
    return {
        "base_url": base_url, "timeout": DEFAULT_TIMEOUT, "headers": _headers(),
        "trust_env": False, "verify": not base_url.startswith("http://"),
    }


def _unreachable(base_url: str, exc: Exception) -> DaemonUnreachable:
    return DaemonUnreachable(
        f"could not connect to localllm at {base_url} ({exc.__class__.__name__}); "
        "is it running? Start it with 'localllm serve'"
    )


# -- starting the daemon -------------------------------------------------------
def is_local_url(base_url: str) -> bool:
    return (urlsplit(base_url).hostname or "") in _LOCAL_HOSTS


def daemon_alive(base_url: str | None = None, timeout: float = 1.0) -> bool:
    url = base_url or config.client_base_url()
    try:
        with httpx.Client(**{**_http_kwargs(url), "timeout": timeout}) as http:
            return http.get("/").status_code == 200
    except httpx.HTTPError:
        return False


def ensure_daemon(base_url: str | None = None, *, wait: float = 30.0) -> bool:
    """Make sure a daemon answers at ``base_url``; start one if needed.

    Returns True when this call started it.  Only local addresses are started;
    for a remote one the failure is reported as ``DaemonUnreachable``.
    """
    url = base_url or config.client_base_url()
    if daemon_alive(url):
        return False
    if not is_local_url(url):
        raise DaemonUnreachable(f"could not connect to localllm at {url}")
    log_path = paths.logs() / "server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"Starting localllm daemon at {url} (log: {log_path})", file=sys.stderr)
    proc = _spawn_serve(url, log_path)
    deadline = time.monotonic() + wait
    exited: int | None = None
    while time.monotonic() < deadline:
        if daemon_alive(url, timeout=0.5):
            return True
        if exited is None and (exited := proc.poll()) is not None:
            # Another command may have started a daemon at the same moment (ours then
            # finds the port taken): give that one a few seconds to answer.
            deadline = min(deadline, time.monotonic() + 5.0)
        time.sleep(0.1)
    if exited is not None:
        raise LocalLLMError(
            f"the daemon exited during start-up (status {exited}):\n{_tail(log_path)}"
        )
    raise DaemonUnreachable(
        f"the daemon did not answer at {url} within {wait:.0f}s; see {log_path}"
    )


def _spawn_serve(url: str, log_path: Path) -> subprocess.Popen[bytes]:
    from localllm import children

    parts = urlsplit(url)
    kwargs: dict[str, Any] = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
    else:
        kwargs["start_new_session"] = True  # Ctrl-C in this terminal must not stop it
    with open(log_path, "ab") as log:
        # The daemon outlives the command that started it: no death signal.
        return children.spawn(
            "localllm", "serve", env={"LOCALLLM_HOST": parts.netloc}, dies_with_parent=False,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True,
            **kwargs)


def _tail(path: Path, lines: int = 10) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- the sync client ------------------------------------------------------------
class Client:
    """Blocking client: ``with Client() as c: c.list()``."""

    def __init__(
        self, base_url: str | None = None, *, autostart: bool = False,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url or config.client_base_url()
        self.autostart = autostart and is_local_url(self.base_url)
        self.http = httpx.Client(**_http_kwargs(self.base_url), transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, *, stream: bool = False, **kw: Any) -> httpx.Response:
        request = self.http.build_request(method, path, **kw)
        try:
            return self.http.send(request, stream=stream)
        except httpx.ConnectError as exc:
            if not self.autostart:
                raise _unreachable(self.base_url, exc) from None
            self.autostart = False  # one attempt per client
            ensure_daemon(self.base_url)
            return self.http.send(self.http.build_request(method, path, **kw), stream=stream)

    def request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send JSON, return the decoded JSON answer (None for an empty body)."""
        kw = {"json": payload} if payload is not None else {}
        resp = self._send(method, path, **kw)
        _raise_for(resp, resp.content)
        return resp.json() if resp.content else None

    def stream(self, method: str, path: str, payload: Any = None) -> Iterator[dict[str, Any]]:
        """Send JSON and yield each NDJSON object of the answer."""
        kw = {"json": payload} if payload is not None else {}
        resp = self._send(method, path, stream=True, **kw)
        try:
            if resp.status_code >= 400:
                _raise_for(resp, resp.read())
            for line in resp.iter_lines():
                item = _stream_item(line)
                if item is not None:
                    yield item
        finally:
            resp.close()

    def heartbeat(self) -> bool:
        return self._send("GET", "/").status_code == 200

    def version(self) -> str:
        return str(self.request("GET", "/api/version")["version"])

    def list(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/tags")["models"])

    def show(self, model: str, *, verbose: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", "/api/show", {"model": model, "verbose": verbose}
        )
        return result

    def delete(self, model: str) -> None:
        self.request("DELETE", "/api/delete", {"model": model})

    def copy(self, source: str, destination: str) -> None:
        self.request("POST", "/api/copy", {"source": source, "destination": destination})

    def pull(self, model: str) -> Iterator[dict[str, Any]]:
        return self.stream("POST", "/api/pull", {"model": model, "stream": True})

    def blob_exists(self, digest: str) -> bool:
        resp = self._send("HEAD", f"/api/blobs/{digest}")
        if resp.status_code == 404:
            return False
        _raise_for(resp, resp.content)
        return True

    def upload_blob(self, digest: str, path: Path,
                    progress: Callable[[int], None] | None = None) -> None:
        """Upload a file as a blob; ``progress(bytes sent so far)`` after each chunk."""
        with open(path, "rb") as fh:
            def chunks() -> Iterator[bytes]:
                sent = 0
                while chunk := fh.read(1 << 20):
                    yield chunk
                    sent += len(chunk)
                    if progress is not None:
                        progress(sent)
            resp = self._send("POST", f"/api/blobs/{digest}", content=chunks())
        _raise_for(resp, resp.content)


# -- the async client (TUI) -------------------------------------------------------
class AsyncClient:
    """Non-blocking twin of ``Client``: ``async with AsyncClient() as c: await c.list()``."""

    def __init__(
        self, base_url: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        """``transport`` lets tests talk to an app in-process (``httpx.ASGITransport``)."""
        self.base_url = base_url or config.client_base_url()
        self.http = httpx.AsyncClient(**_http_kwargs(self.base_url), transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _send(
        self, method: str, path: str, *, stream: bool = False, **kw: Any
    ) -> httpx.Response:
        try:
            return await self.http.send(self.http.build_request(method, path, **kw), stream=stream)
        except httpx.ConnectError as exc:
            raise _unreachable(self.base_url, exc) from None

    async def request(self, method: str, path: str, payload: Any = None) -> Any:
        kw = {"json": payload} if payload is not None else {}
        resp = await self._send(method, path, **kw)
        _raise_for(resp, resp.content)
        return resp.json() if resp.content else None

    async def stream(
        self, method: str, path: str, payload: Any = None
    ) -> AsyncIterator[dict[str, Any]]:
        kw = {"json": payload} if payload is not None else {}
        resp = await self._send(method, path, stream=True, **kw)
        try:
            if resp.status_code >= 400:
                _raise_for(resp, await resp.aread())
            async for line in resp.aiter_lines():
                item = _stream_item(line)
                if item is not None:
                    yield item
        finally:
            await resp.aclose()

    async def heartbeat(self) -> bool:
        return (await self._send("GET", "/")).status_code == 200

    async def version(self) -> str:
        return str((await self.request("GET", "/api/version"))["version"])

    async def ps(self) -> list[dict[str, Any]]:
        """The loaded models (``/api/ps``): size, size_vram, context_length, expires_at."""
        return list((await self.request("GET", "/api/ps"))["models"])

    async def list(self) -> list[dict[str, Any]]:
        return list((await self.request("GET", "/api/tags"))["models"])

    async def show(self, model: str, *, verbose: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "POST", "/api/show", {"model": model, "verbose": verbose}
        )
        return result

    async def delete(self, model: str) -> None:
        await self.request("DELETE", "/api/delete", {"model": model})

    async def copy(self, source: str, destination: str) -> None:
        await self.request("POST", "/api/copy", {"source": source, "destination": destination})

    def pull(self, model: str) -> AsyncIterator[dict[str, Any]]:
        return self.stream("POST", "/api/pull", {"model": model, "stream": True})

    def chat(self, payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """``/api/chat`` streamed: ``payload`` is the whole request (``stream`` is forced on)."""
        return self.stream("POST", "/api/chat", {**payload, "stream": True})
