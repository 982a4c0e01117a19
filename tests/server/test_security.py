"""Host-header guard, CORS allow-list and API key, through the whole app."""

from __future__ import annotations

import socket

import httpx
import pytest

from localllm.server.app import create_app
from localllm.server.security import host_allowed, origin_hosts, origin_pattern
from localllm.store.local import Store
from tests.support.routes import BASE_URL

pytestmark = pytest.mark.anyio


def _client(store: Store, bind_host: str = "127.0.0.1") -> httpx.AsyncClient:
    app = create_app(store, bind_host=bind_host)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


@pytest.mark.parametrize(
    "host",
    [
        "evil.com",
        "evil.com:11434",
        "localhost.evil.com",
        "8.8.8.8",
        "box.local",
        "printer.local:11434",
        "svc.internal",
    ],
)
async def test_foreign_host_header_is_403_on_loopback(client: httpx.AsyncClient, host: str) -> None:
    r = await client.get("/api/tags", headers={"host": host})
    assert r.status_code == 403
    assert "error" in r.json()


@pytest.mark.parametrize(
    "host",
    [
        "localhost:11434",
        "localhost",
        "127.0.0.1:11434",
        "[::1]:11434",
        "10.0.0.5",
        "192.168.1.20:11434",
        "app.localhost:3000",
        "0.0.0.0:11434",
    ],
)
async def test_local_host_headers_pass(client: httpx.AsyncClient, host: str) -> None:
    r = await client.get("/api/tags", headers={"host": host})
    assert r.status_code == 200, host


async def test_host_guard_is_off_when_bound_to_all_interfaces(store: Store) -> None:
    async with _client(store, bind_host="0.0.0.0") as c:
        assert (await c.get("/", headers={"host": "evil.com"})).status_code == 200


def test_host_allowed_units() -> None:
    assert host_allowed("")
    assert not host_allowed("evil.local.com")
    assert not host_allowed("1.1.1.1:80")
    assert not host_allowed("box.local")  # mDNS: any device on the LAN may answer
    assert host_allowed(socket.gethostname())
    allowed = origin_hosts(["http://myapp.local:3000", "https://*.example.com"])
    assert host_allowed("myapp.local:11434", allowed)
    assert host_allowed("MyApp.Local.", allowed)
    # A wildcard origin names pages that may call the API, never Host names: any
    # name under it could be rebound to 127.0.0.1.
    assert not host_allowed("a.example.com", allowed)
    assert not host_allowed("other.local", allowed)
    assert not host_allowed("example.com.evil.com", allowed)
    assert origin_hosts([]) == frozenset()
    assert (
        origin_hosts(
            ["*", "chrome-extension://*", "http://*:8080", "https://a*b.c", "moz-extension://*/x"]
        )
        == frozenset()
    )


async def test_configured_origin_hosts_pass_the_host_guard(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_ORIGINS", "http://studio.local:8080")
    async with _client(store) as c:
        assert (await c.get("/api/tags", headers={"host": "studio.local"})).status_code == 200
        assert (await c.get("/api/tags", headers={"host": "other.local"})).status_code == 403


async def test_preflight_from_allowed_origin(client: httpx.AsyncClient) -> None:
    r = await client.options(
        "/api/chat",
        headers={
            "origin": "http://localhost:5173",
            "access-control-request-method": "POST",
            "access-control-request-headers": (
                "content-type, x-stainless-os, X-Stainless-Retry-Count"
            ),
        },
    )
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "x-stainless-os" in r.headers["access-control-allow-headers"]


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:8080",
        "https://0.0.0.0",
        "app://obsidian.md",
        "file://",
        "tauri://localhost",
        "vscode-webview://abc123",
        "vscode-file://vscode-app",
    ],
)
async def test_builtin_origins_allowed(client: httpx.AsyncClient, origin: str) -> None:
    r = await client.get("/api/tags", headers={"origin": origin})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("site", ["cross-site", "same-site", "Cross-Site"])
@pytest.mark.parametrize(
    "method, path",
    [("GET", "/api/search?q=e&limit=1"), ("GET", "/api/tags"), ("POST", "/api/pull")],
)
async def test_a_cross_site_request_without_an_origin_is_refused(
    client: httpx.AsyncClient, site: str, method: str, path: str
) -> None:
    # <img src="http://127.0.0.1:11434/api/search?q=e">: no Origin, no preflight, but the
    # browser says where it comes from.  No exception for GET.
    headers = {"sec-fetch-site": site, "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
    r = await client.request(method, path, headers=headers, content=b'{"model": "x"}')
    assert r.status_code == 403
    assert r.json()["error"] == "forbidden: cross-site request without an allowed origin"
    # The same request from an allowed origin (a local app's fetch) passes the guard.
    ok = await client.get("/api/tags", headers={**headers, "origin": "http://localhost:3000"})
    assert ok.status_code == 200


@pytest.mark.parametrize("site", ["none", "same-origin", None])
async def test_typed_urls_same_origin_and_non_browsers_pass(
    client: httpx.AsyncClient, site: str | None
) -> None:
    headers = {"sec-fetch-site": site} if site else {}
    assert (await client.get("/api/tags", headers=headers)).status_code == 200


@pytest.mark.parametrize("origin", ["http://evil.com", "http://localhost.evil.com", "null"])
async def test_foreign_origin_is_refused(client: httpx.AsyncClient, origin: str) -> None:
    pre = await client.options(
        "/api/tags",
        headers={
            "origin": origin,
            "access-control-request-method": "GET",
        },
    )
    assert pre.status_code == 403
    assert "access-control-allow-origin" not in pre.headers
    # Simple requests skip the preflight in browsers: refuse those as well.
    r = await client.post("/api/pull", content=b'{"model":"x"}', headers={"origin": origin})
    assert r.status_code == 403


async def test_preflight_with_unknown_header_is_refused(client: httpx.AsyncClient) -> None:
    r = await client.options(
        "/api/tags",
        headers={
            "origin": "http://localhost",
            "access-control-request-method": "GET",
            "access-control-request-headers": "x-secret-thing",
        },
    )
    assert r.status_code == 403


async def test_extra_origins_from_environment(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_ORIGINS", "https://my.app, chrome-extension://*")
    async with _client(store) as c:
        for origin in ("https://my.app", "chrome-extension://abcdef"):
            r = await c.get("/api/tags", headers={"origin": origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        assert (await c.get("/", headers={"origin": "https://my.app.evil"})).status_code == 403


def test_origin_pattern_escapes_dots() -> None:
    pattern = origin_pattern(["https://a.b"])
    assert pattern.match("https://a.b") and not pattern.match("https://aXb")


async def test_api_key(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_API_KEY", "s3cret")
    async with _client(store) as c:
        assert (await c.get("/")).status_code == 200
        r = await c.get("/api/tags")
        assert r.status_code == 401 and "error" in r.json()
        bad = await c.get("/api/tags", headers={"authorization": "Bearer nope"})
        assert bad.status_code == 401
        ok = await c.get("/api/tags", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200
