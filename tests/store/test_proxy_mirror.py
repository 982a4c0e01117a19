"""A Hub mirror (``HF_ENDPOINT``) behind a proxy (``HTTP_PROXY``/``HTTPS_PROXY``, ``NO_PROXY``):
every request of a pull, a search and a fit check's header read goes through the proxy to
the mirror (issue 37 §3).  ``HF_ENDPOINT`` points at the Hub stand-in (tests/support/hub.py);
the proxy is a forwarding stand-in that logs what it forwards.

Each of our Hub clients is a plain ``httpx.Client`` (``store/hub.py``, ``download.py``,
``remote.py``, ``headercache.py``, ``hubhttp.py``'s bounded client for the search), whose
``trust_env`` reads the proxy variables when it is made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.errors import PullError
from localllm.store import headercache, hub, remote, search
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.store.pull import pull_model
from tests.support.forward_proxy import ForwardProxy
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub

REPO = "acme/Tiny-GGUF"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ForwardProxy]:
    """The proxy stand-in, with no proxy variable set yet (not even the developer's)."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    remote.clear_cache()  # header reads must reach the network
    headercache.cache.clear()
    p = ForwardProxy().start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def mirror(hubstub: HubStub, tmp_path: Path) -> HubStub:
    """The stand-in as the mirror HF_ENDPOINT names, with one repo of one quant."""
    hubstub.add_file(REPO, "Tiny-Q4_K_M.gguf", write_gguf(tmp_path / "tiny.gguf", Shape()))
    return hubstub


def on_mirror(mirror: HubStub, url: str) -> bool:
    """``url`` is the mirror's: its API and resolve URLs, or the "CDN" it redirects to."""
    return url.startswith((f"{mirror.url}/", f"http://localhost:{mirror.port}/"))


def test_a_pull_goes_through_the_proxy_to_the_mirror(
    mirror: HubStub,
    proxy: ForwardProxy,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    f = mirror.repos[REPO]["Tiny-Q4_K_M.gguf"]
    mirror.cut_once[f.path] = 100_000  # the resume's range request goes through it too
    entry = pull_model(store, parse_name(f"hf.co/{REPO}"), lambda e: None)
    assert hashlib.sha256(store.model_path(entry).read_bytes()).hexdigest() == f.sha256
    seen = proxy.requests
    assert len(seen) == len(mirror.requests)  # every request the mirror saw came through it
    assert all(on_mirror(mirror, r.url) for r in seen)
    urls = [r.url for r in seen]
    assert f"{mirror.url}/api/models/{REPO}/tree/main?recursive=true" in urls
    assert f"{mirror.url}/{REPO}/resolve/main/{f.path}" in urls
    cdn = [r for r in seen if r.url == f"http://localhost:{mirror.port}/cdn/{f.sha256}"]
    assert [r.range is None for r in cdn] == [True, False]
    assert str(cdn[1].range).startswith("bytes=")


def test_search_and_the_fit_checks_header_reads_go_through_the_proxy(
    mirror: HubStub, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    found = search.search("tiny", 5)
    assert [r.repo for r in found] == [REPO]
    urls = [r.url for r in proxy.requests]
    assert any(u.startswith(f"{mirror.url}/api/models?") and "search=tiny" in u for u in urls)
    assert [r for r in proxy.requests if r.range]  # the header, read over range requests
    before = len(proxy.requests)
    files = [hf for hf in hub.list_repo(REPO) if hf.path.endswith(".gguf")]
    for read in (remote.read_headers, headercache.read_headers):  # pull --dry-run's, show's
        remote.clear_cache()
        headercache.cache.clear()
        assert read(REPO, files).headers
    ranged = [r for r in proxy.requests[before:] if r.range]
    assert len(ranged) >= 2 and all(on_mirror(mirror, r.url) for r in ranged)
    assert len(proxy.requests) == len(mirror.requests)


def test_no_proxy_names_hosts_reached_directly(
    mirror: HubStub, proxy: ForwardProxy, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    pull_model(store, parse_name(f"hf.co/{REPO}"), lambda e: None)
    assert search.search("tiny", 5)
    assert mirror.requests and proxy.requests == []


def test_an_https_mirror_is_asked_through_https_proxy(
    mirror: HubStub, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY serves https:// endpoints (the real Hub): the client asks the proxy for a
    tunnel (CONNECT), which this stand-in refuses, so the pull fails naming the mirror."""
    monkeypatch.setenv("HF_ENDPOINT", f"https://127.0.0.1:{mirror.port}")
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setattr(hub, "LIST_BACKOFF_S", 0.001)
    with pytest.raises(PullError, match=f"cannot reach the Hub at https://127.0.0.1:{mirror.port}"):
        hub.list_repo(REPO)
    assert proxy.requests
    assert {(r.method, r.url) for r in proxy.requests} == {("CONNECT", f"127.0.0.1:{mirror.port}")}
    assert mirror.requests == []
