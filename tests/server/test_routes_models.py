"""Model-management routes through the ASGI app: answers, error shapes and status codes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest

from localllm.store.local import Store
from tests.support.models import add_model

pytestmark = pytest.mark.anyio

HOSTILE_NAMES = ["../x", "/etc/passwd", "a/../../b", "x" * 700, "a/b/c/d", "..", "a\\b", "m:..", ""]
HOSTILE_DIGESTS = [
    "sha256:../../x",
    "sha256:..%2F..%2Fx",
    "sha256-" + "0" * 63,
    "md5:" + "0" * 32,
    "..%2F..%2Fetc%2Fpasswd",
    "sha256:" + "G" * 64,
    "sha256:" + "0" * 65,
]


def blob_files(store: Store) -> list[str]:
    root = store.blobs.root
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


async def test_root_and_version(client: httpx.AsyncClient) -> None:
    r = await client.get("/")
    assert r.status_code == 200
    assert r.text == "localllm is running"
    assert r.headers["content-type"].startswith("text/plain")
    assert (await client.head("/")).status_code == 200
    r = await client.get("/api/version")
    assert r.status_code == 200 and re.fullmatch(r"\d+\.\d+\.\d+.*", r.json()["version"])
    assert (await client.head("/api/version")).status_code == 200


async def test_tags_lists_models_with_ollama_fields(
    client: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    assert (await client.get("/api/tags")).json() == {"models": []}
    digest = add_model(store, tmp_path, "tiny:latest")
    add_model(store, tmp_path, "hf.co/someone/Repo-GGUF:Q4_K_M")
    r = await client.get("/api/tags")
    assert r.status_code == 200
    models = {m["name"]: m for m in r.json()["models"]}
    assert set(models) == {"tiny:latest", "hf.co/someone/Repo-GGUF:Q4_K_M"}
    tiny = models["tiny:latest"]
    assert tiny["model"] == "tiny:latest"
    assert tiny["digest"] == digest.removeprefix("sha256:")
    entry = store.list()[0]
    assert tiny["size"] == entry.manifest.total_size > 0
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", tiny["modified_at"])
    assert tiny["details"]["format"] == "gguf"
    assert tiny["details"]["family"] == "llama"
    assert tiny["details"]["quantization_level"] == "F32"
    assert (await client.head("/api/tags")).status_code == 200


async def test_show_returns_details_metadata_and_texts(
    client: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    add_model(store, tmp_path, "tiny")
    r = await client.post("/api/show", json={"model": "tiny"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_info"]["general.architecture"] == "llama"
    assert body["model_info"]["llama.context_length"] == 2048
    assert body["model_info"]["llama.embedding_length"] == 64
    assert body["details"]["family"] == "llama"
    assert body["template"] == "{{ .System }} {{ .Prompt }}"
    assert body["system"] == "You are terse."
    assert body["license"].startswith("MIT License")
    assert 'stop                           "<|end|>"' in body["parameters"]
    assert "temperature                    0.7" in body["parameters"]
    assert body["capabilities"] == ["completion"]
    assert body["modified_at"]
    entry = store.list()[0]
    assert f"FROM {store.model_path(entry)}" in body["modelfile"]
    assert 'TEMPLATE """{{ .System }} {{ .Prompt }}"""' in body["modelfile"]
    assert 'PARAMETER stop "</s>"' in body["modelfile"]
    # The deprecated "name" field still works, and names match case-insensitively.
    r2 = await client.post("/api/show", json={"name": "TINY:Latest"})
    assert r2.status_code == 200 and r2.json()["system"] == "You are terse."


async def test_show_capabilities_follow_the_template(
    client: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    template = "{{ if .Tools }}{{ .Tools }}{{ end }}{{ .Suffix }}"
    add_model(store, tmp_path, "tools", template=template)
    caps = (await client.post("/api/show", json={"model": "tools"})).json()["capabilities"]
    assert caps == ["completion", "tools", "insert"]


async def test_show_errors(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/show", json={"model": "nope"})
    assert r.status_code == 404 and "not found" in r.json()["error"]
    r = await client.post("/api/show")
    assert (r.status_code, r.json()) == (400, {"error": "missing request body"})
    r = await client.post("/api/show", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"].startswith("invalid JSON")
    r = await client.post("/api/show", json={"model": 5})
    assert r.status_code == 400 and r.json()["error"].startswith('invalid value for "model"')
    r = await client.post("/api/show", json=["tiny"])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]
    r = await client.post("/api/show", json={})
    assert (r.status_code, r.json()) == (400, {"error": "model is required"})


async def test_body_is_json_whatever_the_content_type(
    client: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    # curl -d sends application/x-www-form-urlencoded; Ollama reads JSON anyway.
    add_model(store, tmp_path, "tiny")
    r = await client.post(
        "/api/show",
        content=b'{"model": "tiny"}',
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200


@pytest.mark.parametrize("name", HOSTILE_NAMES)
async def test_hostile_names_are_400_everywhere(
    client: httpx.AsyncClient, store: Store, tmp_path: Path, name: str
) -> None:
    add_model(store, tmp_path, "tiny")
    before = sorted(p.relative_to(store.root) for p in store.root.rglob("*"))
    for method, path, body in [
        ("POST", "/api/show", {"model": name}),
        ("DELETE", "/api/delete", {"model": name}),
        ("POST", "/api/pull", {"model": name}),
        ("POST", "/api/copy", {"source": "tiny", "destination": name}),
        ("POST", "/api/copy", {"source": name, "destination": "other"}),
    ]:
        r = await client.request(method, path, json=body)
        assert r.status_code == 400, (method, path, name, r.text)
        assert isinstance(r.json()["error"], str) and r.json()["error"]
    assert sorted(p.relative_to(store.root) for p in store.root.rglob("*")) == before


async def test_copy_and_delete(client: httpx.AsyncClient, store: Store, tmp_path: Path) -> None:
    add_model(store, tmp_path, "tiny")
    r = await client.post("/api/copy", json={"source": "tiny", "destination": "me/alias:v1"})
    assert r.status_code == 200
    names = {m["name"] for m in (await client.get("/api/tags")).json()["models"]}
    assert names == {"tiny:latest", "me/alias:v1"}
    r = await client.post("/api/copy", json={"source": "missing", "destination": "x"})
    assert r.status_code == 404
    r = await client.post("/api/copy", json={"source": "tiny"})
    assert r.status_code == 400

    blobs = blob_files(store)
    r = await client.request("DELETE", "/api/delete", json={"model": "tiny"})
    assert r.status_code == 200
    assert blob_files(store) == blobs  # still used by the alias
    r = await client.request("DELETE", "/api/delete", json={"model": "tiny"})
    assert r.status_code == 404 and "not found" in r.json()["error"]
    r = await client.request("DELETE", "/api/delete", json={"name": "me/alias:v1"})
    assert r.status_code == 200
    assert (await client.get("/api/tags")).json() == {"models": []}
    assert blob_files(store) == []
    r = await client.request("DELETE", "/api/delete")
    assert (r.status_code, r.json()["error"]) == (400, "missing request body")


async def test_blob_upload_and_head(client: httpx.AsyncClient, store: Store) -> None:
    data = b"some layer bytes" * 1000
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.head(f"/api/blobs/{digest}")).status_code == 404
    r = await client.post(f"/api/blobs/{digest}", content=data)
    assert r.status_code == 201, r.text
    assert store.blobs.path(digest).read_bytes() == data
    assert (await client.head(f"/api/blobs/{digest}")).status_code == 200
    # The dash form names the same blob; a second upload is a no-op.
    dash = digest.replace(":", "-")
    assert (await client.head(f"/api/blobs/{dash}")).status_code == 200
    assert (await client.post(f"/api/blobs/{digest}", content=data)).status_code == 200


async def test_blob_upload_with_wrong_digest_stores_nothing(
    client: httpx.AsyncClient, store: Store
) -> None:
    claimed = "sha256:" + "ab" * 32
    r = await client.post(f"/api/blobs/{claimed}", content=b"not what was claimed")
    assert r.status_code == 400
    got = "sha256:" + hashlib.sha256(b"not what was claimed").hexdigest()
    assert r.json() == {"error": f'digest mismatch, expected "{claimed}", got "{got}"'}
    assert blob_files(store) == []


@pytest.mark.parametrize("digest", HOSTILE_DIGESTS)
async def test_invalid_digests_are_400(
    client: httpx.AsyncClient, store: Store, tmp_path: Path, digest: str
) -> None:
    r = await client.head(f"/api/blobs/{digest}")
    assert r.status_code == 400
    r = await client.post(f"/api/blobs/{digest}", content=b"x")
    assert r.status_code == 400 and "invalid digest" in r.json()["error"]
    assert blob_files(store) == []
    assert not any(tmp_path.rglob("x"))


async def test_unknown_routes_and_methods_use_error_shapes(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/nothing")
    assert r.status_code == 404 and isinstance(r.json()["error"], str)
    r = await client.get("/api/show")
    assert r.status_code == 405 and isinstance(r.json()["error"], str)
    r = await client.get("/v1/nothing")
    assert r.status_code == 404
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
