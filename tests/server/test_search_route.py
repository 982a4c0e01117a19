"""``GET /api/search`` and the dry run and fit check of ``/api/pull``, with the Hub stand-in."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from localllm.models.remote import Machine
from localllm.scheduler.planner import PlanOptions
from localllm.server import routes_search
from localllm.store import remote
from localllm.store.local import Store
from tests.support.hubstub import HubStub
from tests.support.routes import ndjson
from tests.support.shapes import cpu

pytestmark = pytest.mark.anyio
MODEL = "hf.co/someone/Tiny-GGUF"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    remote.clear_cache()


def _machine(monkeypatch: pytest.MonkeyPatch, ram_gib: float) -> None:
    """Plan on one CPU with ``ram_gib`` of free memory instead of this machine's devices."""
    here = Machine((cpu(ram_gib),), PlanOptions())
    monkeypatch.setattr(routes_search, "this_machine", lambda plans=(): here)


def _files(store: Store) -> list[Any]:
    return [p for p in store.root.rglob("*") if p.is_file()]


async def test_search_answers_the_documented_shape(
    hub: HubStub, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _machine(monkeypatch, 64)
    hub.set_meta("someone/Tiny-GGUF", downloads=1234, likes=56, updated="2025-05-01T00:00:00Z")
    r = await client.get("/api/search", params={"q": "tiny", "limit": 5})
    assert r.status_code == 200, r.text
    (m,) = r.json()["models"]
    assert {k: m[k] for k in ("name", "repo", "downloads", "likes", "updated")} == {
        "name": MODEL,
        "repo": "someone/Tiny-GGUF",
        "downloads": 1234,
        "likes": 56,
        "updated": "2025-05-01T00:00:00Z",
    }
    assert isinstance(m["catalog"], list)
    assert m["capabilities"] == ["completion"] and m["context_length"] == 2048
    sizes = {f.path: f.size for f in hub.repos["someone/Tiny-GGUF"].values()}
    assert [(q["tag"], q["files"], q["size"]) for q in m["quants"]] == [
        ("Q4_K_M", ["tiny-Q4_K_M.gguf"], sizes["tiny-Q4_K_M.gguf"]),
        ("Q8_0", ["tiny-Q8_0.gguf"], sizes["tiny-Q8_0.gguf"]),
    ]
    fit = m["quants"][0]["fit"]
    assert set(fit) >= {"status", "summary", "layers_on_gpu", "layers", "memory", "context"}
    assert (fit["status"], fit["summary"], fit["layers"]) == ("cpu", "CPU only", 3)
    assert fit["context"] == 2048 and fit["memory"]["CPU"] > 0


async def test_search_on_this_machines_own_devices(hub: HubStub, client: httpx.AsyncClient) -> None:
    r = await client.get("/api/search", params={"q": "tiny"})
    assert r.status_code == 200, r.text
    fit = r.json()["models"][0]["quants"][0]["fit"]
    assert fit["status"] in ("gpu", "partial", "cpu")
    assert sum(fit["memory"].values()) > 0


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": ""},
        {"q": "tiny", "limit": 0},
        {"q": "tiny", "limit": 500},
        {"q": "tiny", "limit": "ten"},
    ],
)
async def test_bad_search_requests_are_400(
    hub: HubStub, client: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    r = await client.get("/api/search", params=params)
    assert r.status_code == 400 and "error" in r.json()


async def test_a_dry_run_reads_the_header_and_downloads_nothing(
    hub: HubStub, client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _machine(monkeypatch, 64)
    r = await client.post("/api/pull", json={"model": MODEL, "dry_run": True, "stream": False})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["dry_run"] is True and got["model"] == f"{MODEL}:latest"
    assert got["source"] == "hf.co/someone/Tiny-GGUF:Q4_K_M"
    size = hub.repos["someone/Tiny-GGUF"]["tiny-Q4_K_M.gguf"].size
    assert got["files"] == [{"file": "tiny-Q4_K_M.gguf", "size": size}] and got["size"] == size
    assert got["details"]["family"] == "llama" and got["context_length"] == 2048
    assert got["fit"]["status"] == "cpu" and got["fit"]["max_context"] == 2048
    assert got["header_bytes"] > 0
    assert _files(store) == []
    # Streamed, the same result comes last, after the progress.
    r = await client.post("/api/pull", json={"model": MODEL, "dry_run": True})
    lines = ndjson(r.text)
    assert lines[0] == {"status": "pulling manifest"} and lines[-1]["fit"] == got["fit"]
    assert lines[1] == {"status": "using Q4_K_M (default): tiny-Q4_K_M.gguf"}
    assert _files(store) == []


async def test_force_false_refuses_a_model_too_big_before_downloading(
    hub: HubStub, client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _machine(monkeypatch, 0.001)
    r = await client.post("/api/pull", json={"model": MODEL, "force": False, "stream": False})
    assert r.status_code == 409
    assert "does not fit on this machine" in r.json()["error"]
    assert "--force" in r.json()["error"]
    assert _files(store) == []
    # Only the header's range reads reached the files: a download asks without a Range.
    cdn = [x for x in hub.requests if x.path.startswith("/cdn/")]
    assert cdn and all(x.range and not x.range.endswith("-") for x in cdn)


async def test_an_ollama_client_pull_warns_and_goes_on(
    hub: HubStub, client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _machine(monkeypatch, 0.001)
    r = await client.post("/api/pull", json={"model": MODEL})  # what Ollama clients send
    lines = ndjson(r.text)
    assert lines[-1] == {"status": "success"}
    warnings = [x["status"] for x in lines if x.get("status", "").startswith("warning:")]
    assert len(warnings) == 1 and "does not fit on this machine" in warnings[0]
    assert (await client.post("/api/show", json={"model": MODEL})).status_code == 200


async def test_force_true_pulls_a_model_too_big(
    hub: HubStub, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _machine(monkeypatch, 0.001)
    r = await client.post("/api/pull", json={"model": MODEL, "force": True, "stream": False})
    assert (r.status_code, r.json()) == (200, {"status": "success"})


async def test_a_model_that_fits_says_so_in_the_progress(
    hub: HubStub, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _machine(monkeypatch, 64)
    lines = ndjson((await client.post("/api/pull", json={"model": MODEL, "force": False})).text)
    fits = [x["status"] for x in lines if x.get("status", "").startswith("fits: ")]
    assert fits and fits[0].startswith("fits: CPU only, ")
    assert lines[-1] == {"status": "success"}


async def test_the_ollama_python_client_pulls_a_model_too_big_with_a_warning(
    hub: HubStub, app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ollama

    _machine(monkeypatch, 0.001)
    sdk = ollama.AsyncClient(host="http://localhost:11434", transport=httpx.ASGITransport(app=app))
    statuses = [p.status async for p in await sdk.pull(MODEL, stream=True)]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert any(s and s.startswith("warning: ") and "does not fit" in s for s in statuses)
    done = await sdk.pull(MODEL)  # not streamed: the last status alone
    assert done.status == "success"
