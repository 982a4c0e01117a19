"""The attacks Ollama had CVEs for, each against our app: none may work, none may crash it."""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Route

from localllm.server.app import create_app
from localllm.server.logs import RequestIdFilter
from localllm.server.serve import warn_if_exposed
from localllm.server.streaming import Emit, events_from_thread, progress_response
from localllm.store.local import Store
from localllm.store.manifests import Layer, Manifest, Media
from localllm.store.names import parse_name
from tests.support.fake_scheduler import fake_scheduler

pytestmark = pytest.mark.anyio
KEY = "k3y-for-tests"


def make_app(store: Store) -> FastAPI:
    return create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())


@pytest.fixture
async def c(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=make_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


def endpoints(routes: list[BaseRoute]) -> Iterator[tuple[str, str]]:
    """(method, path) of every route, descending into included routers."""
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's included router
        if inner is not None:
            yield from endpoints(inner.routes)
        elif isinstance(route, (APIRoute, Route)):
            for method in sorted(route.methods or ()):
                yield method, re.sub(r"\{[^}]+\}", "x", route.path)


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


# -- API key on every endpoint -----------------------------------------------------------


async def test_every_endpoint_refuses_a_missing_or_wrong_key(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_API_KEY", KEY)
    app = make_app(store)
    checked = 0
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as client:
        for method, path in endpoints(app.routes):
            bad = [
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": f"Basic {KEY}"},
                {"Authorization": f"Bearer {KEY}x"},
            ]
            for headers in bad:
                r = await client.request(method, path, headers=headers)
                want_open = path in ("/", "/health")
                assert (r.status_code != 401) if want_open else (r.status_code == 401), (
                    method,
                    path,
                    headers,
                    r.status_code,
                )
            r = await client.request(method, path, headers={"Authorization": f"Bearer {KEY}"})
            assert r.status_code != 401, (method, path)
            checked += 1
        # The key is not accepted from the query string either.
        assert (await client.get(f"/api/tags?key={KEY}")).status_code == 401
        r = await client.post("/v1/chat/completions", json={})
        assert r.json()["error"]["message"].startswith("unauthorized")
    paths = {path for _, path in endpoints(app.routes)}
    assert {"/v1/chat/completions", "/metrics", "/api/blobs/x", "/health/ready"} <= paths
    assert checked >= 20


# -- path traversal ----------------------------------------------------------------------

EVIL_DIGESTS = [
    "sha256:../../../../etc/passwd",
    "sha256-../../../etc/passwd",
    "..%2F..%2F..%2Fetc%2Fpasswd",
    "sha256:" + "a" * 63 + "/",
    "sha256:" + "../" * 21 + "x",
    "sha256:" + "A" * 64,
    "sha256-" + "0" * 64 + "/../../x",
]


@pytest.mark.parametrize("digest", EVIL_DIGESTS)
async def test_digest_traversal(
    c: httpx.AsyncClient, store: Store, tmp_path: Path, digest: str
) -> None:
    before = files_under(tmp_path)
    # 404 when the client already resolved the dots to another path; never 2xx or 5xx.
    assert (await c.head(f"/api/blobs/{digest}")).status_code in (400, 404)
    r = await c.post(f"/api/blobs/{digest}", content=b"payload")
    assert r.status_code in (400, 404), r.text
    r = await c.post("/api/create", json={"model": "m", "files": {"a.gguf": digest}})
    assert r.status_code == 400
    assert files_under(tmp_path) == before


EVIL_NAMES = [
    "../../../../tmp/evil",
    "a/../../../b",
    "..",
    "x/y/z/../../../..",
    "/etc/passwd",
    "hf.co/../../x",
    "ns/../../m:tag",
    "m:../../t",
    "m:" + "x" * 300,
    "a\\..\\..\\b",
    "a\x00b",
]


@pytest.mark.parametrize("name", EVIL_NAMES)
async def test_name_traversal(c: httpx.AsyncClient, tmp_path: Path, name: str) -> None:
    before = files_under(tmp_path)
    calls = [
        ("POST", "/api/show", {"model": name}),
        ("POST", "/api/pull", {"model": name}),
        ("DELETE", "/api/delete", {"model": name}),
        ("POST", "/api/copy", {"source": name, "destination": "ok"}),
        ("POST", "/api/copy", {"source": "ok", "destination": name}),
        ("POST", "/api/generate", {"model": name, "prompt": "x"}),
        ("POST", "/api/chat", {"model": name, "messages": [{"role": "user", "content": "x"}]}),
    ]
    for method, path, body in calls:
        r = await c.request(method, path, json=body)
        assert r.status_code in (400, 404), (path, r.status_code, r.text)
    if name.isprintable():
        r = await c.get(f"/v1/models/{name}")
        assert r.status_code in (400, 404)
    assert files_under(tmp_path) == before


# -- DNS rebinding and foreign pages -----------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.com",
        "localhost.evil.com",
        "127.0.0.1.nip.io",
        "evil.com:11434",
        "[::1].evil.com",
        "localhost\r\nx: y",
    ],
)
async def test_rebinding_hosts_are_refused(c: httpx.AsyncClient, host: str) -> None:
    try:
        r = await c.get("/api/tags", headers={"host": host})
    except httpx.LocalProtocolError:
        return  # the client itself will not send it
    assert r.status_code == 403


@pytest.mark.parametrize(
    ("variable", "origins"),
    [
        ("LOCALLLM_ORIGINS", "*"),
        ("LOCALLLM_ORIGINS", "chrome-extension://*"),
        ("LOCALLLM_ORIGINS", "https://my.app, *"),
        ("LOCALLLM_ORIGINS", "http://*:8080"),
        ("LOCALLLM_ORIGINS", "https://*.example.com"),
        ("OLLAMA_ORIGINS", "*"),
    ],
)
async def test_a_wildcard_origin_does_not_open_the_host_guard(
    store: Store, monkeypatch: pytest.MonkeyPatch, variable: str, origins: str
) -> None:
    # DNS rebinding: evil.example.com resolves to 127.0.0.1 after the page loaded, so
    # its reads arrive with "Host: evil.example.com" and, for a simple GET, no Origin
    # header at all.  A wildcard origin must leave the Host check as it was.
    monkeypatch.delenv("LOCALLLM_ORIGINS", raising=False)
    monkeypatch.setenv(variable, origins)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(store)), base_url="http://localhost"
    ) as client:
        for path in ("/api/tags", "/api/ps", "/metrics", "/api/version"):
            for host in ("evil.example.com", "evil.example.com:11434", "a.b.c.d.nip.io:8080"):
                r = await client.get(path, headers={"host": host})
                assert r.status_code == 403, (origins, path, host)
                assert "models" not in r.text
            r = await client.get(
                path, headers={"host": "evil.example.com", "origin": "chrome-extension://abc"}
            )
            assert r.status_code == 403
        # The origins themselves still work from pages on this machine.
        if origins == "*":
            r = await client.get("/api/tags", headers={"origin": "https://anything.example"})
            assert r.status_code == 200
            assert r.headers["access-control-allow-origin"] == "https://anything.example"


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.com",
        "http://localhost.evil.com",
        "http://localhost:80.evil.com",
        "null",
        "http://127.0.0.1:1/../evil",
        "https://evil.com/localhost",
    ],
)
async def test_foreign_origins_cannot_call_or_preflight(c: httpx.AsyncClient, origin: str) -> None:
    r = await c.post("/api/pull", json={"model": "x"}, headers={"origin": origin})
    assert r.status_code == 403
    r = await c.options(
        "/api/pull", headers={"origin": origin, "access-control-request-method": "POST"}
    )
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


# -- file-existence probing --------------------------------------------------------------


async def test_create_from_path_does_not_reveal_whether_files_exist(
    c: httpx.AsyncClient, tmp_path: Path
) -> None:
    secret = tmp_path / "outside" / "secret.gguf"
    secret.parent.mkdir()
    secret.write_bytes(b"GGUF")
    answers = []
    for probe in (
        str(secret),
        str(tmp_path / "outside" / "nothing.gguf"),
        "/etc/passwd",
        "/etc/no-such-file",
        str(secret.parent),
        "/root/../etc/shadow",
    ):
        r = await c.post("/api/create", json={"model": "m", "from": probe, "stream": False})
        answers.append((r.status_code, r.json()["error"].replace(probe, "<P>")))
    assert len(set(answers)) == 1, answers
    assert answers[0][0] == 403


# -- oversized bodies --------------------------------------------------------------------


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_MAX_BODY", "1KiB")
    monkeypatch.setenv("LOCALLLM_MAX_BLOB_SIZE", "8KiB")


@pytest.mark.usefixtures("small_caps")
async def test_json_bodies_are_capped(store: Store) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(store)), base_url="http://localhost"
    ) as client:
        big = {"model": "m", "prompt": "x" * 2000}
        for path in ("/api/generate", "/api/show", "/v1/chat/completions", "/api/create"):
            r = await client.post(path, json=big)
            assert r.status_code == 413, path

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: cut off while reading
            yield b'{"model": "m", "prompt": "'
            for _ in range(10):
                yield b"x" * 500
            yield b'"}'

        r = await client.post("/api/generate", content=chunks())
        assert r.status_code == 413
        assert "too large" in r.json()["error"]


@pytest.mark.usefixtures("small_caps")
async def test_blob_uploads_have_their_own_larger_cap(store: Store, tmp_path: Path) -> None:
    import hashlib

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(store)), base_url="http://localhost"
    ) as client:
        ok = b"y" * 4000  # over the JSON cap, under the blob cap
        r = await client.post(f"/api/blobs/sha256:{hashlib.sha256(ok).hexdigest()}", content=ok)
        assert r.status_code == 201
        before = files_under(tmp_path)
        big = b"z" * 10000

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        digest = f"sha256:{hashlib.sha256(big).hexdigest()}"
        assert (await client.post(f"/api/blobs/{digest}", content=big)).status_code == 413
        assert (await client.post(f"/api/blobs/{digest}", content=chunks())).status_code == 413
        assert (await client.head(f"/api/blobs/{digest}")).status_code == 404
    assert files_under(tmp_path) == before  # no partial file left behind


# -- uploads cannot fill the disk ---------------------------------------------------------


@pytest.fixture
def small_disk(monkeypatch: pytest.MonkeyPatch, store: Store) -> int:
    """A 40 MiB disk under the store: its free space falls as files there grow."""
    import localllm.store.diskspace as blobs_module

    size = 40 << 20

    def free_space(path: Path) -> tuple[Path, int]:
        used = sum(f.stat().st_size for f in files_under(store.root))
        return path, size - used

    monkeypatch.setattr(blobs_module, "free_space", free_space)
    monkeypatch.setenv("LOCALLLM_MIN_FREE_DISK", "24MiB")
    return size


@pytest.mark.usefixtures("small_disk")
async def test_an_upload_that_would_fill_the_disk_is_refused(store: Store) -> None:
    import hashlib

    big = os.urandom(20 << 20)  # 20 MiB on a 40 MiB disk that must keep 24 MiB free
    digest = f"sha256:{hashlib.sha256(big).hexdigest()}"
    sent = [0]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: checked as it arrives
        for i in range(0, len(big), 256 << 10):
            sent[0] += 256 << 10
            yield big[i : i + (256 << 10)]

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(store)), base_url="http://localhost"
    ) as client:
        # Declared up front: refused before a byte is stored.
        r = await client.post(f"/api/blobs/{digest}", content=big)
        assert r.status_code == 507, r.text
        message = r.json()["error"]
        assert "LOCALLLM_MIN_FREE_DISK" in message and "disk space" in message
        assert str(store.root) not in message  # no paths of the user's home
        assert files_under(store.root) == set()
        # Streamed with no length: cut off once the free space reaches the floor
        # (within one 4 MiB look), and the temp file is gone.
        r = await client.post(f"/api/blobs/{digest}", content=chunks())
        assert r.status_code == 507, r.text
        assert sent[0] <= (16 + 4 + 1) << 20
        assert files_under(store.root) == set()
        assert (await client.head(f"/api/blobs/{digest}")).status_code == 404
        # What leaves enough room still goes in, either way.
        small = os.urandom(8 << 20)
        ok = f"sha256:{hashlib.sha256(small).hexdigest()}"
        assert (await client.post(f"/api/blobs/{ok}", content=small)).status_code == 201
        assert (await client.head(f"/api/blobs/{ok}")).status_code == 200


async def test_a_store_already_below_the_floor_takes_no_upload(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_MIN_FREE_DISK", "1000000T")  # more than any disk has
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=make_app(store)), base_url="http://localhost"
    ) as client:

        async def one() -> AsyncIterator[bytes]:
            yield b"x"

        digest = "sha256:" + "ab" * 32
        for body in (b"x", one()):
            r = await client.post(f"/api/blobs/{digest}", content=body)
            assert r.status_code == 507 and "LOCALLLM_MIN_FREE_DISK" in r.json()["error"]
            assert r.headers["connection"] == "close"
    assert files_under(store.root) == set()


# -- hostile GGUF ------------------------------------------------------------------------


def _gguf(n_tensors: int, n_kv: int, tail: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + tail


def _kv_string(key: bytes, declared_len: int) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, declared_len)


def _kv_array(key: bytes, count: int) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, count)


HOSTILE = {
    "tensors": _gguf(2**63, 1),
    "kvs": _gguf(1, 2**62),
    "string": _gguf(0, 1, _kv_string(b"general.architecture", 2**60)),
    "array": _gguf(0, 1, _kv_array(b"tokenizer.ggml.tokens", 2**61)),
    "keylen": _gguf(0, 1, struct.pack("<Q", 2**63)),
    "truncated": _gguf(0, 3, _kv_string(b"general.name", 10)[:-4]),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_hostile_gguf_upload_and_use_is_a_clean_4xx(
    c: httpx.AsyncClient, store: Store, kind: str
) -> None:
    import hashlib

    data = HOSTILE[kind]
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    assert (await c.post(f"/api/blobs/{digest}", content=data)).status_code == 201
    r = await c.post("/api/create", json={"model": "bomb", "files": {"m.gguf": digest}})
    assert 400 <= r.status_code < 500, r.text
    # Planted in the store directly (as if an older version had accepted it): still 4xx.
    config = store.put_config({"model_format": "gguf"})
    store.commit(parse_name("planted"), Manifest(config, [Layer(Media.MODEL, digest, len(data))]))
    for path, body in (
        ("/api/generate", {"model": "planted", "prompt": "x"}),
        ("/api/chat", {"model": "planted", "messages": [{"role": "user", "content": "x"}]}),
        ("/api/show", {"model": "planted"}),
        (
            "/v1/chat/completions",
            {"model": "planted", "messages": [{"role": "user", "content": "x"}]},
        ),
    ):
        r = await c.post(path, json=body)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)
    assert (await c.get("/health")).status_code == 200


# -- logs --------------------------------------------------------------------------------


async def test_request_id_is_echoed_or_made(c: httpx.AsyncClient) -> None:
    r = await c.get("/api/version", headers={"x-request-id": "trace-42"})
    assert r.headers["x-request-id"] == "trace-42"
    made = (await c.get("/api/version")).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{16}", made)
    hostile = (await c.get("/api/version", headers={"x-request-id": "a b" + "x" * 500})).headers[
        "x-request-id"
    ]
    assert re.fullmatch(r"[0-9a-f]{16}", hostile)


async def test_an_unexpected_error_tells_the_client_only_its_request_id(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # An exception's text can carry paths of the user's home: it goes to the log under
    # the request id, and the client gets that id to quote.
    secret = "/home/alice/.local/share/localllm/models/blobs/sha256-ff00"
    router = APIRouter()

    @router.get("/api/crash")
    @router.get("/v1/crash")
    def crash() -> None:
        raise RuntimeError(f"cannot open {secret}")

    @router.post("/api/crashstream")
    async def crash_stream(request: Request) -> Response:
        def work(emit: Emit, cancel: object) -> None:
            emit({"status": "working"})
            raise OSError(2, "No such file or directory", secret)

        return await progress_response(events_from_thread(work, request=request), True)

    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler(), routers=[router])
    caplog.set_level(logging.ERROR)
    caplog.handler.addFilter(RequestIdFilter())  # as the daemon's handlers do
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as client:
        for path, rid in (("/api/crash", "rid-a"), ("/v1/crash", None)):
            r = await client.get(path, headers={"x-request-id": rid} if rid else {})
            assert r.status_code == 500
            rid = r.headers["x-request-id"]
            body = r.json()
            message = body["error"] if path.startswith("/api/") else body["error"]["message"]
            assert message == (
                f"internal error (request id {rid}); the daemon's log has the details"
            )
            assert secret not in r.text and "alice" not in r.text
            logged = [
                rec
                for rec in caplog.records
                if getattr(rec, "request_id", None) == rid
                and rec.exc_info
                and secret in str(rec.exc_info[1])
            ]
            assert logged, f"the detail is not in the log under {rid}"
        r = await client.post("/api/crashstream", headers={"x-request-id": "rid-s"})
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert lines == [
            {"status": "working"},
            {"error": "internal error (request id rid-s); the daemon's log has the details"},
        ]
        assert any(
            getattr(rec, "request_id", None) == "rid-s"
            and rec.exc_info
            and secret in str(rec.exc_info[1])
            for rec in caplog.records
        )


@pytest.mark.parametrize("debug", [False, True])
async def test_prompts_are_logged_only_with_debug(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, debug: bool
) -> None:
    monkeypatch.setenv("LOCALLLM_DEBUG", "1" if debug else "0")
    app = make_app(store)
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost"
    ) as client:
        await client.post(
            "/api/generate",
            json={"model": "nope", "prompt": "SECRET-PROMPT"},
            headers={"x-request-id": "rid-1"},
        )
    access = [r for r in caplog.records if r.name == "localllm.access"]
    assert access and getattr(access[-1], "request_id", None) == "rid-1"
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert ("SECRET-PROMPT" in logged) is debug


def test_exposed_bind_without_key_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert warn_if_exposed("0.0.0.0") is True
    assert "LOCALLLM_API_KEY is not set" in capsys.readouterr().err
    assert warn_if_exposed("127.0.0.1") is False
    assert warn_if_exposed("::1") is False
    monkeypatch.setenv("LOCALLLM_API_KEY", KEY)
    assert warn_if_exposed("0.0.0.0") is False
    assert capsys.readouterr().err == ""
