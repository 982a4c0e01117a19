"""Both clients against a daemon that dies mid-answer: every transport error is one line of ours.

Also: the two clients offer the same named calls (and no generic request),
and how each kind of httpx transport error reads.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localllm.api._httpx import httpx
from localllm.api.client import AsyncClient, Client
from localllm.api.daemon import (
    DaemonConnectionLost,
    DaemonTimeout,
    DaemonUnreachable,
    transport_error,
)
from localllm.errors import LocalLLMError
from tests.support.daemon import free_port
from tests.support.halfstream import LINES, HalfStreamServer

URL = "http://127.0.0.1:1"
LOST = "connection to the daemon lost"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAMED: dict[str, Callable[[Any], Any]] = {
    "chat": lambda c: c.chat(BODY),
    "generate": lambda c: c.generate({"model": "m", "prompt": "hi"}),
    "pull": lambda c: c.pull("m"),
    "create": lambda c: c.create({"model": "n", "from": "m"}),
}


def _public(cls: type) -> set[str]:
    return {n for n, v in inspect.getmembers(cls) if callable(v) and not n.startswith("_")}


def test_both_clients_offer_the_same_calls_and_only_those() -> None:
    calls = {
        "heartbeat",
        "version",
        "list",
        "ps",
        "show",
        "copy",
        "delete",
        "pull",
        "create",
        "chat",
        "generate",
        "embed",
        "rerank",
        "load",
        "unload",
        "blob_exists",
        "upload_blob",
        "search",
    }
    assert _public(Client) - {"close"} == _public(AsyncClient) - {"aclose"} == calls


def _sync_stream(url: str, call: str, got: list[dict[str, Any]]) -> None:
    with Client(url) as c:
        chunks: Iterator[dict[str, Any]] = STREAMED[call](c)
        for chunk in chunks:
            got.append(chunk)


async def _async_stream(url: str, call: str, got: list[dict[str, Any]]) -> None:
    async with AsyncClient(url) as c:
        chunks: AsyncIterator[dict[str, Any]] = STREAMED[call](c)
        async for chunk in chunks:
            got.append(chunk)


@pytest.mark.parametrize("call", list(STREAMED))
@pytest.mark.parametrize("mode", ["close", "reset"])
def test_a_stream_cut_midway_is_a_lost_connection(call: str, mode: str) -> None:
    sync_got: list[dict[str, Any]] = []
    async_got: list[dict[str, Any]] = []
    with HalfStreamServer(mode) as server:
        with pytest.raises(DaemonConnectionLost, match=LOST) as sync_err:
            _sync_stream(server.url, call, sync_got)
        with pytest.raises(DaemonConnectionLost, match=LOST) as async_err:
            asyncio.run(_async_stream(server.url, call, async_got))
    for err in (sync_err.value, async_err.value):
        assert "\n" not in str(err) and server.url in str(err)
    if mode == "close":  # what came before the cut was handed over
        assert sync_got == async_got == LINES


@pytest.mark.parametrize("mode", ["close", "reset"])
def test_an_answer_cut_midway_is_a_lost_connection(mode: str) -> None:
    async def both(url: str) -> None:
        async with AsyncClient(url) as c:
            await c.ps()

    with HalfStreamServer(mode) as server:
        with Client(server.url) as c:
            assert c.heartbeat() and c.show("m")["capabilities"] == ["completion"]
            with pytest.raises(DaemonConnectionLost, match=LOST):
                c.list()
        with pytest.raises(DaemonConnectionLost, match=LOST):
            asyncio.run(both(server.url))


def test_an_upload_cut_midway_is_a_lost_connection(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(b"\0" * (16 << 20))  # more than the socket buffers hold
    digest = "sha256:" + "0" * 64

    async def upload(url: str) -> None:
        async with AsyncClient(url) as c:
            await c.upload_blob(digest, blob)

    with HalfStreamServer("reset") as server:
        with Client(server.url) as c, pytest.raises(DaemonConnectionLost, match=LOST):
            c.upload_blob(digest, blob)
        with pytest.raises(DaemonConnectionLost, match=LOST):
            asyncio.run(upload(server.url))


def test_nothing_listening_is_unreachable_for_both_clients() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def ps() -> None:
        async with AsyncClient(url) as c:
            await c.ps()

    with Client(url) as c, pytest.raises(DaemonUnreachable, match="localllm serve"):
        c.ps()
    with pytest.raises(DaemonUnreachable, match="localllm serve"):
        asyncio.run(ps())


@pytest.mark.parametrize(
    ("exc", "kind", "text"),
    [
        (httpx.ConnectError("refused"), DaemonUnreachable, "could not connect"),
        (httpx.ConnectTimeout("slow"), DaemonUnreachable, "could not connect"),
        (httpx.ReadTimeout("slow"), DaemonTimeout, "did not answer in time (ReadTimeout)"),
        (httpx.WriteTimeout("slow"), DaemonTimeout, "did not answer in time"),
        (httpx.PoolTimeout("slow"), DaemonTimeout, "did not answer in time"),
        (httpx.ReadError("reset"), DaemonConnectionLost, f"{LOST} (ReadError)"),
        (httpx.WriteError("pipe"), DaemonConnectionLost, f"{LOST} (WriteError)"),
        (httpx.RemoteProtocolError("incomplete\nread"), DaemonConnectionLost, LOST),
        (httpx.CloseError("x"), DaemonConnectionLost, LOST),
        (
            httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'.\nmore"),
            DaemonUnreachable,
            "could not talk to localllm at http://127.0.0.1:1: Request URL",
        ),
        (httpx.ProxyError("no"), DaemonUnreachable, "could not talk"),
    ],
)
def test_each_transport_error_becomes_one_line_of_ours(
    exc: httpx.RequestError, kind: type[LocalLLMError], text: str
) -> None:
    err = transport_error(URL, exc)
    assert type(err) is kind and isinstance(err, LocalLLMError)
    assert text in str(err) and "\n" not in str(err)


def _recorder(sent: list[tuple[str, str, Any]]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        sent.append((request.method, request.url.path, body))
        if body and body.get("stream"):
            return httpx.Response(200, content=b'{"status": "success"}\n')
        return httpx.Response(200, json={"version": "1", "models": [], "embeddings": [[0.5]]})

    return httpx.MockTransport(answer)


def test_both_clients_send_the_same_requests() -> None:
    """What each call sends, once per client; the routes are Ollama's."""
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("version", (), {}),
        ("list", (), {}),
        ("ps", (), {}),
        ("show", ("m",), {"verbose": True}),
        ("copy", ("m", "n"), {}),
        ("delete", ("m",), {}),
        ("embed", ({"model": "m", "input": "x"},), {}),
        ("load", ("m",), {"keep_alive": "5m"}),
        ("unload", ("m",), {}),
    ]
    sync_sent: list[tuple[str, str, Any]] = []
    async_sent: list[tuple[str, str, Any]] = []
    with Client(URL, transport=_recorder(sync_sent)) as c:
        for name, args, kw in calls:
            getattr(c, name)(*args, **kw)
        for name in STREAMED:
            assert list(STREAMED[name](c)) == [{"status": "success"}]

    async def run_async() -> None:
        async with AsyncClient(URL, transport=_recorder(async_sent)) as c:
            for name, args, kw in calls:
                await getattr(c, name)(*args, **kw)
            for name in STREAMED:
                assert [x async for x in STREAMED[name](c)] == [{"status": "success"}]

    asyncio.run(run_async())
    assert sync_sent == async_sent
    assert [(method, path) for method, path, _ in sync_sent] == [
        ("GET", "/api/version"),
        ("GET", "/api/tags"),
        ("GET", "/api/ps"),
        ("POST", "/api/show"),
        ("POST", "/api/copy"),
        ("DELETE", "/api/delete"),
        ("POST", "/api/embed"),
        ("POST", "/api/chat"),
        ("POST", "/api/generate"),
        ("POST", "/api/chat"),
        ("POST", "/api/generate"),
        ("POST", "/api/pull"),
        ("POST", "/api/create"),
    ]
    # Loading is a chat without messages; unloading, a request with keep_alive 0.
    assert sync_sent[7][2] == {"model": "m", "messages": [], "stream": False, "keep_alive": "5m"}
    assert sync_sent[8][2] == {"model": "m", "keep_alive": 0, "stream": False}
    assert all(body["stream"] is True for _, _, body in sync_sent[9:])
