"""``/api/create`` with a vision projector: the PROJECTOR line, a clip file in ``files``
(Ollama's way), inheritance from FROM, and refusals."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from localllm.modelfile.parser import parse
from localllm.modelfile.serialize import to_text
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from tests.support.create_api import create, upload
from tests.support.hubstub import write_clip_header
from tests.support.tinymodel import make_tiny_model

pytestmark = pytest.mark.anyio


def projector_of(store: Store, name: str) -> list[tuple[str, str | None]]:
    layers = store.get(parse_name(name)).manifest.by_type(Media.PROJECTOR)
    return [(ly.digest, ly.name) for ly in layers]


async def test_projector_field_files_and_inheritance(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    model = await upload(client, tiny_gguf)
    proj = await upload(client, write_clip_header(tmp_path / "mmproj-F16.gguf"))
    r = await create(
        client,
        {
            "model": "seer",
            "files": {"tiny.gguf": model},
            "projector": {"mmproj-F16.gguf": proj},
            "stream": False,
        },
    )
    assert r.status_code == 200, r.text
    assert projector_of(store, "seer") == [(proj, "mmproj-F16.gguf")]
    shown = (await client.post("/api/show", json={"model": "seer"})).json()
    assert "vision" in shown["capabilities"]
    assert parse(shown["modelfile"]).projector == str(store.blobs.path(proj))
    # Ollama's form: the clip GGUF among the files.
    r = await create(
        client,
        {"model": "seer2", "stream": False, "files": {"tiny.gguf": model, "mmproj.gguf": proj}},
    )
    assert r.status_code == 200, r.text
    entry = store.get(parse_name("seer2"))
    assert [ly.digest for ly in entry.manifest.by_type(Media.MODEL)] == [model]
    assert projector_of(store, "seer2") == [(proj, "mmproj.gguf")]
    # FROM a model with a projector keeps it; a PROJECTOR line replaces it.
    r = await create(client, {"model": "child", "from": "seer", "stream": False})
    assert r.status_code == 200 and projector_of(store, "child") == [(proj, "mmproj-F16.gguf")]
    other = await upload(client, write_clip_header(tmp_path / "mmproj-F32.gguf", seed=3))
    r = await create(
        client,
        {
            "model": "child",
            "from": "seer",
            "stream": False,
            "projector": {"mmproj-F32.gguf": other},
        },
    )
    assert r.status_code == 200 and projector_of(store, "child") == [(other, "mmproj-F32.gguf")]


async def test_a_projector_must_be_a_clip_gguf(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    model = await upload(client, tiny_gguf)
    not_clip = await upload(client, make_tiny_model(tmp_path / "other"))
    r = await create(
        client,
        {
            "model": "bad",
            "files": {"tiny.gguf": model},
            "projector": {"mm.gguf": not_clip},
            "stream": False,
        },
    )
    assert r.status_code == 400
    assert 'PROJECTOR "mm.gguf" is not a vision projector' in r.json()["error"]
    assert not store.manifests.exists(parse_name("bad"))


def test_modelfile_projector_line_round_trips() -> None:
    mf = parse("FROM ./model.gguf\nPROJECTOR ./mmproj-F16.gguf\n")
    assert mf.projector == "./mmproj-F16.gguf"
    assert parse(to_text(mf)).projector == "./mmproj-F16.gguf"
    with pytest.raises(Exception, match="only one PROJECTOR line"):
        parse("FROM x\nPROJECTOR a.gguf\nprojector b.gguf\n")
