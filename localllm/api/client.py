"""The one HTTP client of the daemon, used by the CLI and the TUI (sync and async).

``Client`` and ``AsyncClient`` offer the same named calls: ``heartbeat``,
``version``, ``list``, ``ps``, ``show``, ``copy``, ``delete``, ``pull``, ``search``,
``create``, ``chat``, ``generate``, ``embed``, ``rerank``, ``load``, ``unload``,
``blob_exists`` and ``upload_blob``.  Callers use those, never a route: each
call's route and body are written once, in ``api/calls.py``, for both clients.
Answers come back as plain JSON values (dicts), streams as iterators of
NDJSON objects, both typed with ``api.wire``'s shapes (the daemon's answers
are trusted, not checked: they are dicts at run time); how answers and
failures turn into ``localllm.errors`` lives in ``api.daemon``.
``Client(autostart=True)`` starts a local daemon on its first failure to
connect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from localllm import config
from localllm.api._httpx import httpx
from localllm.api.calls import Body, Calls, Sent, file_pieces
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
    tls_failure,
    transport_errors,
)
from localllm.api.wire import (
    ChatChunk,
    EmbedResponse,
    GenerateChunk,
    Progress,
    ProgressEvent,
    PsEntry,
    RerankNative,
    SearchModel,
    ShowResponse,
    TagsEntry,
)

# The errors callers catch, importable from here with the client.
__all__ = [
    "AsyncClient",
    "Client",
    "DaemonConnectionLost",
    "DaemonTimeout",
    "DaemonUnreachable",
    "ensure_daemon",
    "error_for",
]

# The answers that are lists (named here: in the classes ``list`` is a method's name).
Models = list[TagsEntry]
Loaded = list[PsEntry]
Found = list[SearchModel]


def _blob_found(resp: httpx.Response) -> bool:
    if resp.status_code == 404:
        return False
    raise_for(resp, resp.content)
    return True


# -- the sync client (CLI) ------------------------------------------------------------
class Client:
    """Blocking client: ``with Client() as c: c.list()``."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        autostart: bool = False,
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
            except httpx.ConnectError as exc:
                # A TLS failure means something answers: starting a daemon would not help.
                if not self.autostart or tls_failure(exc) is not None:
                    raise
            self.autostart = False  # one attempt per client
            ensure_daemon(self.base_url)
            return self.http.send(self.http.build_request(method, path, **kw), stream=stream)

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send JSON, return the decoded JSON answer (None for an empty body)."""
        return answer(self._send(method, path, json=payload))

    def _stream(self, method: str, path: str, payload: Any = None) -> Iterator[Any]:
        """Send JSON and yield each NDJSON object of the answer."""
        resp = self._send(method, path, stream=True, json=payload)
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
        return str(self._request(*Calls.version)["version"])

    def list(self) -> Models:
        return list(self._request(*Calls.tags)["models"])

    def ps(self) -> Loaded:
        """The loaded models: size, size_vram, context_length, expires_at."""
        return list(self._request(*Calls.ps)["models"])

    def show(
        self,
        model: str,
        *,
        verbose: bool = False,
        fit_contexts: Sequence[int] | None = None,
        num_parallel: int | None = None,
    ) -> ShowResponse:
        """``/api/show``; ``fit_contexts`` adds the daemon's ``fit`` verdicts (ours)."""
        got: ShowResponse = self._request(*Calls.show(model, verbose, fit_contexts, num_parallel))
        return got

    def copy(self, source: str, destination: str) -> None:
        self._request(*Calls.copy(source, destination))

    def search(self, query: str, limit: int = 10) -> Found:
        """Hugging Face GGUF models for ``query``, each quant with its fit on the daemon's
        machine (``GET /api/search``; shape in docs/api.md)."""
        return list(self._request(*Calls.search(query, limit))["models"])

    def delete(self, model: str) -> None:
        self._request(*Calls.delete(model))

    def embed(self, body: Body) -> EmbedResponse:
        got: EmbedResponse = self._request(*Calls.embed(body))
        return got

    def rerank(self, body: Body) -> RerankNative:
        got: RerankNative = self._request(*Calls.rerank(body))
        return got

    def load(self, model: str, *, keep_alive: str | float | None = None) -> None:
        self._request(*Calls.load(model, keep_alive))

    def unload(self, model: str) -> None:
        self._request(*Calls.unload(model))

    def blob_exists(self, digest: str) -> bool:
        return _blob_found(self._send("HEAD", Calls.blob(digest)))

    def upload_blob(self, digest: str, path: Path, progress: Sent | None = None) -> None:
        """Upload a file as a blob; ``progress(bytes sent so far)`` after each chunk."""
        with open(path, "rb") as fh:
            resp = self._send("POST", Calls.blob(digest), content=file_pieces(fh, progress))
        raise_for(resp, resp.content)

    def pull(
        self,
        model: str,
        projector: str | None = None,
        *,
        force: bool | None = None,
        dry_run: bool = False,
        max_rate: int | None = None,
    ) -> Iterator[ProgressEvent]:
        """``/api/pull``'s progress.  ``force``: False refuses a model too big for the
        daemon's machine before downloading, True pulls it anyway (None: the daemon
        warns and pulls, as for Ollama's clients).  ``dry_run``: no download; the last
        event (``wire.DryRun``) holds the files and the fit (header read over range
        requests).  ``max_rate``: the pull's bandwidth cap, bytes per second."""
        return self._stream(*Calls.pull(model, projector, force, dry_run, max_rate))

    def create(self, body: Body) -> Iterator[Progress]:
        """``/api/create`` with ``body`` as the request: its progress events."""
        return self._stream(*Calls.streamed("/api/create", body))

    def chat(self, body: Body) -> Iterator[ChatChunk]:
        """``/api/chat`` with ``body`` as the whole request: its chunks."""
        return self._stream(*Calls.streamed("/api/chat", body))

    def generate(self, body: Body) -> Iterator[GenerateChunk]:
        """``/api/generate`` with ``body`` as the whole request: its chunks."""
        return self._stream(*Calls.streamed("/api/generate", body))


# -- the async client (TUI) -------------------------------------------------------------
class AsyncClient:
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
        return answer(await self._send(method, path, json=payload))

    async def _stream(self, method: str, path: str, payload: Any = None) -> AsyncIterator[Any]:
        resp = await self._send(method, path, stream=True, json=payload)
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
        return str((await self._request(*Calls.version))["version"])

    async def list(self) -> Models:
        return list((await self._request(*Calls.tags))["models"])

    async def ps(self) -> Loaded:
        """The loaded models: size, size_vram, context_length, expires_at."""
        return list((await self._request(*Calls.ps))["models"])

    async def show(self, model: str, *, verbose: bool = False) -> ShowResponse:
        got: ShowResponse = await self._request(*Calls.show(model, verbose))
        return got

    async def copy(self, source: str, destination: str) -> None:
        await self._request(*Calls.copy(source, destination))

    async def search(self, query: str, limit: int = 10) -> Found:
        """Hugging Face GGUF models for ``query``, each quant with its fit on the daemon's
        machine (``GET /api/search``; shape in docs/api.md)."""
        return list((await self._request(*Calls.search(query, limit)))["models"])

    async def delete(self, model: str) -> None:
        await self._request(*Calls.delete(model))

    async def embed(self, body: Body) -> EmbedResponse:
        got: EmbedResponse = await self._request(*Calls.embed(body))
        return got

    async def rerank(self, body: Body) -> RerankNative:
        got: RerankNative = await self._request(*Calls.rerank(body))
        return got

    async def load(self, model: str, *, keep_alive: str | float | None = None) -> None:
        await self._request(*Calls.load(model, keep_alive))

    async def unload(self, model: str) -> None:
        await self._request(*Calls.unload(model))

    async def blob_exists(self, digest: str) -> bool:
        return _blob_found(await self._send("HEAD", Calls.blob(digest)))

    async def upload_blob(self, digest: str, path: Path, progress: Sent | None = None) -> None:
        """Upload a file as a blob; ``progress(bytes sent so far)`` after each chunk."""
        from anyio import to_thread

        with open(path, "rb") as fh:
            pieces = file_pieces(fh, None)

            async def chunks() -> AsyncIterator[bytes]:
                # Disk reads off the event loop; ``progress`` is called on it.
                sent = 0
                while (chunk := await to_thread.run_sync(next, pieces, None)) is not None:
                    yield chunk
                    sent += len(chunk)
                    if progress is not None:
                        progress(sent)

            resp = await self._send("POST", Calls.blob(digest), content=chunks())
        raise_for(resp, resp.content)

    def pull(
        self,
        model: str,
        projector: str | None = None,
        *,
        force: bool | None = None,
        dry_run: bool = False,
        max_rate: int | None = None,
    ) -> AsyncIterator[ProgressEvent]:
        """As ``Client.pull``."""
        return self._stream(*Calls.pull(model, projector, force, dry_run, max_rate))

    def create(self, body: Body) -> AsyncIterator[Progress]:
        """``/api/create`` with ``body`` as the request: its progress events."""
        return self._stream(*Calls.streamed("/api/create", body))

    def chat(self, body: Body) -> AsyncIterator[ChatChunk]:
        """``/api/chat`` with ``body`` as the whole request: its chunks."""
        return self._stream(*Calls.streamed("/api/chat", body))

    def generate(self, body: Body) -> AsyncIterator[GenerateChunk]:
        """``/api/generate`` with ``body`` as the whole request: its chunks."""
        return self._stream(*Calls.streamed("/api/generate", body))
