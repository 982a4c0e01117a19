"""The one HTTP client of the daemon, used by the CLI and the TUI (sync and async).

``Client`` and ``AsyncClient`` offer the same named calls: ``heartbeat``,
``version``, ``list``, ``ps``, ``show``, ``copy``, ``delete``, ``pull``, ``search``,
``create``, ``chat``, ``generate``, ``embed``, ``load``, ``unload``,
``blob_exists`` and ``upload_blob``.  Callers use those, never a route: each
call's route and body are written once, in ``_Wire``, for both clients.
Answers come back as plain JSON values (dicts), streams as iterators of
NDJSON objects; how answers and failures turn into ``localllm.errors`` lives
in ``api.daemon``.  ``Client(autostart=True)`` starts a local daemon on its
first failure to connect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from localllm import config
from localllm.api._httpx import httpx
from localllm.api.daemon import (
    DaemonConnectionLost,
    DaemonTimeout,
    DaemonUnreachable,
    answer,
    ensure_daemon,
    error_for,
    http_kwargs,
    is_local_url,
    raise_for,
    stream_item,
    transport_errors,
)

# The errors callers catch, importable from here with the client.
__all__ = ["AsyncClient", "Client", "DaemonConnectionLost", "DaemonTimeout",
           "DaemonUnreachable", "ensure_daemon", "error_for"]

JSON = dict[str, Any]
Items = list[JSON]
Call = tuple[str, str, Any]  # HTTP method, path, JSON body (None: no body)
Progress = Callable[[int], None]
_CHUNK = 1 << 20


def _body(payload: Any) -> dict[str, Any]:
    return {"json": payload} if payload is not None else {}


def _blob_found(resp: httpx.Response) -> bool:
    if resp.status_code == 404:
        return False
    raise_for(resp, resp.content)
    return True


def _chunks(fh: BinaryIO, progress: Progress | None) -> Iterator[bytes]:
    """The file in 1 MiB pieces; ``progress(bytes sent so far)`` once each piece is taken."""
    sent = 0
    while chunk := fh.read(_CHUNK):
        yield chunk
        sent += len(chunk)
        if progress is not None:
            progress(sent)


# -- what each call sends ---------------------------------------------------------------
class _Wire:
    """Route and body of each call that answers once, written once for both clients."""

    version: Call = ("GET", "/api/version", None)
    tags: Call = ("GET", "/api/tags", None)
    ps: Call = ("GET", "/api/ps", None)

    @staticmethod
    def show(model: str, verbose: bool) -> Call:
        return "POST", "/api/show", {"model": model, "verbose": verbose}

    @staticmethod
    def copy(source: str, destination: str) -> Call:
        return "POST", "/api/copy", {"source": source, "destination": destination}

    @staticmethod
    def delete(model: str) -> Call:
        return "DELETE", "/api/delete", {"model": model}

    @staticmethod
    def embed(body: JSON) -> Call:
        return "POST", "/api/embed", body

    @staticmethod
    def load(model: str, keep_alive: str | float | None) -> Call:
        # As Ollama: a chat without messages loads the model and answers at once.
        body: JSON = {"model": model, "messages": [], "stream": False}
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        return "POST", "/api/chat", body

    @staticmethod
    def unload(model: str) -> Call:
        # As Ollama's ``stop``: a request with keep_alive 0 unloads the model now.
        return "POST", "/api/generate", {"model": model, "keep_alive": 0, "stream": False}

    @staticmethod
    def search(query: str, limit: int) -> Call:
        from urllib.parse import urlencode

        return "GET", "/api/search?" + urlencode({"q": query, "limit": limit}), None

    @staticmethod
    def blob(digest: str) -> str:
        return f"/api/blobs/{digest}"


S = TypeVar("S")


class _Streams(Generic[S]):
    """The streamed calls, the same code for both clients: ``_stream`` makes the iterator S."""

    def _stream(self, method: str, path: str, payload: Any = None) -> S:
        raise NotImplementedError

    def _streamed(self, path: str, body: JSON) -> S:
        return self._stream("POST", path, {**body, "stream": True})

    def pull(self, model: str, projector: str | None = None, *, force: bool | None = None,
             dry_run: bool = False) -> S:
        """``/api/pull``'s progress.  ``force``: False refuses a model too big for the
        daemon's machine before downloading, True pulls it anyway (None: the daemon
        warns and pulls, as for Ollama's clients).  ``dry_run``: no download; the last
        event holds the files and the fit (header read over range requests)."""
        body: JSON = {"model": model}
        if projector:
            body["projector"] = projector  # a vision projector file or precision, or "none"
        if force is not None:
            body["force"] = force
        if dry_run:
            body["dry_run"] = True
        return self._streamed("/api/pull", body)

    def create(self, body: JSON) -> S:
        """``/api/create`` with ``body`` as the request: its progress events."""
        return self._streamed("/api/create", body)

    def chat(self, body: JSON) -> S:
        """``/api/chat`` with ``body`` as the whole request: its chunks."""
        return self._streamed("/api/chat", body)

    def generate(self, body: JSON) -> S:
        """``/api/generate`` with ``body`` as the whole request: its chunks."""
        return self._streamed("/api/generate", body)


# -- the sync client (CLI) ------------------------------------------------------------
class Client(_Streams[Iterator[JSON]]):
    """Blocking client: ``with Client() as c: c.list()``."""

    def __init__(
        self, base_url: str | None = None, *, autostart: bool = False,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url or config.client_base_url()
        self.autostart = autostart and is_local_url(self.base_url)
        self.http = httpx.Client(**http_kwargs(self.base_url), transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, *, stream: bool = False, **kw: Any) -> httpx.Response:
        with transport_errors(self.base_url):
            try:
                return self.http.send(self.http.build_request(method, path, **kw), stream=stream)
            except httpx.ConnectError:
                if not self.autostart:
                    raise
            self.autostart = False  # one attempt per client
            ensure_daemon(self.base_url)
            return self.http.send(self.http.build_request(method, path, **kw), stream=stream)

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send JSON, return the decoded JSON answer (None for an empty body)."""
        return answer(self._send(method, path, **_body(payload)))

    def _stream(self, method: str, path: str, payload: Any = None) -> Iterator[JSON]:
        """Send JSON and yield each NDJSON object of the answer."""
        resp = self._send(method, path, stream=True, **_body(payload))
        try:
            with transport_errors(self.base_url):
                if resp.status_code >= 400:
                    raise_for(resp, resp.read())
                for line in resp.iter_lines():
                    if (item := stream_item(line)) is not None:
                        yield item
        finally:
            resp.close()

    def heartbeat(self) -> bool:
        return self._send("GET", "/").status_code == 200

    def version(self) -> str:
        return str(self._request(*_Wire.version)["version"])

    def list(self) -> Items:
        return list(self._request(*_Wire.tags)["models"])

    def ps(self) -> Items:
        """The loaded models: size, size_vram, context_length, expires_at."""
        return list(self._request(*_Wire.ps)["models"])

    def show(self, model: str, *, verbose: bool = False) -> JSON:
        return dict(self._request(*_Wire.show(model, verbose)))

    def copy(self, source: str, destination: str) -> None:
        self._request(*_Wire.copy(source, destination))

    def search(self, query: str, limit: int = 10) -> Items:
        """Hugging Face GGUF models for ``query``, each quant with its fit on the daemon's
        machine (``GET /api/search``; shape in docs/api.md)."""
        return list(self._request(*_Wire.search(query, limit))["models"])

    def delete(self, model: str) -> None:
        self._request(*_Wire.delete(model))

    def embed(self, body: JSON) -> JSON:
        return dict(self._request(*_Wire.embed(body)))

    def load(self, model: str, *, keep_alive: str | float | None = None) -> None:
        self._request(*_Wire.load(model, keep_alive))

    def unload(self, model: str) -> None:
        self._request(*_Wire.unload(model))

    def blob_exists(self, digest: str) -> bool:
        return _blob_found(self._send("HEAD", _Wire.blob(digest)))

    def upload_blob(self, digest: str, path: Path, progress: Progress | None = None) -> None:
        """Upload a file as a blob; ``progress(bytes sent so far)`` after each chunk."""
        with open(path, "rb") as fh:
            resp = self._send("POST", _Wire.blob(digest), content=_chunks(fh, progress))
        raise_for(resp, resp.content)


# -- the async client (TUI) -------------------------------------------------------------
class AsyncClient(_Streams[AsyncIterator[JSON]]):
    """Non-blocking twin of ``Client``: ``async with AsyncClient() as c: await c.list()``."""

    def __init__(
        self, base_url: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        """``transport`` lets tests talk to an app in-process (``httpx.ASGITransport``)."""
        self.base_url = base_url or config.client_base_url()
        self.http = httpx.AsyncClient(**http_kwargs(self.base_url), transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _send(
        self, method: str, path: str, *, stream: bool = False, **kw: Any
    ) -> httpx.Response:
        with transport_errors(self.base_url):
            return await self.http.send(self.http.build_request(method, path, **kw), stream=stream)

    async def _request(self, method: str, path: str, payload: Any = None) -> Any:
        return answer(await self._send(method, path, **_body(payload)))

    async def _stream(self, method: str, path: str, payload: Any = None) -> AsyncIterator[JSON]:
        resp = await self._send(method, path, stream=True, **_body(payload))
        try:
            with transport_errors(self.base_url):
                if resp.status_code >= 400:
                    raise_for(resp, await resp.aread())
                async for line in resp.aiter_lines():
                    if (item := stream_item(line)) is not None:
                        yield item
        finally:
            await resp.aclose()

    async def heartbeat(self) -> bool:
        return (await self._send("GET", "/")).status_code == 200

    async def version(self) -> str:
        return str((await self._request(*_Wire.version))["version"])

    async def list(self) -> Items:
        return list((await self._request(*_Wire.tags))["models"])

    async def ps(self) -> Items:
        """The loaded models: size, size_vram, context_length, expires_at."""
        return list((await self._request(*_Wire.ps))["models"])

    async def show(self, model: str, *, verbose: bool = False) -> JSON:
        return dict(await self._request(*_Wire.show(model, verbose)))

    async def copy(self, source: str, destination: str) -> None:
        await self._request(*_Wire.copy(source, destination))

    async def search(self, query: str, limit: int = 10) -> Items:
        """Hugging Face GGUF models for ``query``, each quant with its fit on the daemon's
        machine (``GET /api/search``; shape in docs/api.md)."""
        return list((await self._request(*_Wire.search(query, limit)))["models"])

    async def delete(self, model: str) -> None:
        await self._request(*_Wire.delete(model))

    async def embed(self, body: JSON) -> JSON:
        return dict(await self._request(*_Wire.embed(body)))

    async def load(self, model: str, *, keep_alive: str | float | None = None) -> None:
        await self._request(*_Wire.load(model, keep_alive))

    async def unload(self, model: str) -> None:
        await self._request(*_Wire.unload(model))

    async def blob_exists(self, digest: str) -> bool:
        return _blob_found(await self._send("HEAD", _Wire.blob(digest)))

    async def upload_blob(self, digest: str, path: Path, progress: Progress | None = None
                          ) -> None:
        """Upload a file as a blob; ``progress(bytes sent so far)`` after each chunk."""
        from anyio import to_thread

        with open(path, "rb") as fh:
            pieces = _chunks(fh, None)

            async def chunks() -> AsyncIterator[bytes]:
                # Disk reads off the event loop; ``progress`` is called on it.
                sent = 0
                while (chunk := await to_thread.run_sync(next, pieces, None)) is not None:
                    yield chunk
                    sent += len(chunk)
                    if progress is not None:
                        progress(sent)

            resp = await self._send("POST", _Wire.blob(digest), content=chunks())
        raise_for(resp, resp.content)
