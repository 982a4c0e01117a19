"""``/api/create`` with a draft model (Modelfile ``DRAFT``): by store name and by uploaded
file, the layer it writes, ``/api/show``, inheritance, the store's GC, and refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from localllm.gguf.info import read_model_info
from localllm.modelfile.parser import parse
from localllm.modelfile.serialize import to_text
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from tests.support.create_api import create, upload
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import write_clip_header
from tests.support.routes import ndjson
from tests.support.scriptmodel import make_script_model
from tests.support.tinylora import make_tiny_lora
from tests.support.tinymodel import make_tiny_model

pytestmark = pytest.mark.anyio


def draft_layers(store: Store, name: str) -> list[tuple[str, int, str | None]]:
    layers = store.get(parse_name(name)).manifest.by_type(Media.DRAFT)
    return [(ly.digest, ly.size, ly.name) for ly in layers]


async def show(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    r = await client.post("/api/show", json={"model": name})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def make(client: httpx.AsyncClient, name: str, path: Path, **fields: Any) -> httpx.Response:
    model = await upload(client, path)
    return await create(
        client, {"model": name, "files": {path.name: model}, "stream": False, **fields}
    )


async def test_draft_by_name_and_by_file_make_one_layer_shown_by_show(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    # The same vocabulary as tiny, other weights (so another blob).
    small = make_tiny_model(tmp_path / "small", attention=True, name="small.gguf")
    assert (await make(client, "tiny-draft", small)).status_code == 200
    draft_blob = store.get(parse_name("tiny-draft")).manifest.by_type(Media.MODEL)[0]

    r = await make(client, "fast", tiny_gguf, draft="tiny-draft")
    assert r.status_code == 200, r.text
    # The draft model's own blob, shared, not copied; no file name, so both forms agree.
    assert draft_layers(store, "fast") == [(draft_blob.digest, draft_blob.size, None)]
    r = await make(client, "fast2", tiny_gguf, draft={"small.gguf": draft_blob.digest})
    assert r.status_code == 200, r.text
    assert store.get(parse_name("fast2")).digest == store.get(parse_name("fast")).digest

    shown = await show(client, "fast")
    assert shown["draft"] == {
        "digest": draft_blob.digest,
        "size": draft_blob.size,
        "details": {
            "format": "gguf",
            "family": "llama",
            "parameter_size": read_model_info(small).parameter_size,
            "quantization_level": "F32",
        },
    }
    path = str(store.blobs.path(draft_blob.digest))
    assert parse(shown["modelfile"]).draft == path
    assert f"\nDRAFT {path}\n" in shown["modelfile"]
    assert "draft" not in await show(client, "tiny-draft")
    r = await make(client, "none", tiny_gguf, draft={})  # no file: no draft, as projector {}
    assert r.status_code == 200 and draft_layers(store, "none") == []

    # FROM a model with a draft keeps it; a draft field replaces it.
    r = await create(client, {"model": "child", "from": "fast", "stream": False})
    assert r.status_code == 200 and draft_layers(store, "child") == draft_layers(store, "fast")
    other = await upload(client, make_tiny_model(tmp_path / "other", attention=True, seed=5))
    r = await create(
        client, {"model": "child", "from": "fast", "stream": False, "draft": {"tiny.gguf": other}}
    )
    assert r.status_code == 200 and draft_layers(store, "child")[0][0] == other


async def test_show_details_are_the_drafts_own(client: httpx.AsyncClient, tmp_path: Path) -> None:
    # A draft of another shape (ggufmeta's default vocabulary) for a base of that vocabulary.
    base = write_gguf(tmp_path / "base.gguf", Shape(n_layers=4, n_embd=128))
    small = write_gguf(tmp_path / "small.gguf", Shape(n_layers=1), "Q8_0")
    r = await make(client, "big", base, draft={"small.gguf": await upload(client, small)})
    assert r.status_code == 200, r.text
    draft = (await show(client, "big"))["draft"]
    assert draft["details"]["quantization_level"] == "Q8_0"
    assert draft["size"] == small.stat().st_size


async def test_deleting_the_draft_model_keeps_the_blob_for_its_users(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    small = make_tiny_model(tmp_path / "small", attention=True, name="small.gguf")
    assert (await make(client, "tiny-draft", small)).status_code == 200
    assert (await make(client, "fast", tiny_gguf, draft="tiny-draft")).status_code == 200
    digest = draft_layers(store, "fast")[0][0]
    r = await client.request("DELETE", "/api/delete", json={"model": "tiny-draft"})
    assert r.status_code == 200
    assert store.blobs.exists(digest)  # the draft layer is a reference like any other
    assert (await show(client, "fast"))["draft"]["digest"] == digest
    r = await client.request("DELETE", "/api/delete", json={"model": "fast"})
    assert r.status_code == 200 and not store.blobs.exists(digest)  # the last user went


async def test_a_draft_must_share_the_vocabulary(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    script = await upload(client, make_script_model(tmp_path / "s", {"go": "hello"}))
    r = await make(client, "bad", tiny_gguf, draft={"script.gguf": script})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error.startswith('DRAFT model "script.gguf" does not share the model\'s vocabulary')
    assert "(token 259 is " in error  # the first id past the byte tokens both have
    # As many tokens, one of them another text.
    names = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, 64)]
    base = write_gguf(tmp_path / "base.gguf", Shape())
    names[40] = "other"
    odd = write_gguf(tmp_path / "odd.gguf", Shape(n_layers=1, tokens=tuple(names)))
    r = await make(client, "bad", base, draft={"odd.gguf": await upload(client, odd)})
    assert r.status_code == 400
    assert "(token 40 is 'other', the model's is 't40')" in r.json()["error"]
    assert not store.manifests.exists(parse_name("bad"))
    # As llama.cpp: a vocabulary padded by up to 128 tokens still drafts; more does not.
    names[40] = "t40"
    padded = write_gguf(
        tmp_path / "padded.gguf",
        Shape(n_layers=1, tokens=(*names, *(f"<pad{i}>" for i in range(128)))),
    )
    r = await make(client, "ok", base, draft={"padded.gguf": await upload(client, padded)})
    assert r.status_code == 200, r.text
    wide = write_gguf(
        tmp_path / "wide.gguf",
        Shape(n_layers=1, tokens=(*names, *(f"<pad{i}>" for i in range(129)))),
    )
    r = await make(client, "bad", base, draft={"wide.gguf": await upload(client, wide)})
    assert r.status_code == 400 and "it has 193 tokens, the model has 64" in r.json()["error"]


async def test_what_cannot_be_a_draft(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    async def refused(draft: Any) -> str:
        r = await make(client, "bad", tiny_gguf, draft=draft)
        assert r.status_code in (400, 404), r.text
        assert not store.manifests.exists(parse_name("bad"))
        return str(r.json()["error"])

    lora = await upload(client, make_tiny_lora(tmp_path / "lora"))
    assert "is a LoRA adapter, not a model" in await refused({"lora.gguf": lora})
    clip = await upload(client, write_clip_header(tmp_path / "mmproj.gguf"))
    assert "is a vision projector, not a model" in await refused({"mmproj.gguf": clip})
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    assert "not a valid GGUF file" in await refused({"junk.gguf": await upload(client, junk)})
    first = make_tiny_model(tmp_path / "split", splits=2)
    parts = sorted(first.parent.iterdir())
    digests = {p.name: await upload(client, p) for p in parts}
    assert "one part of a GGUF split into 2 files" in await refused(
        {parts[0].name: digests[parts[0].name]}
    )
    assert "a model takes one draft model file" in await refused(digests)
    r = await create(client, {"model": "split", "files": digests, "stream": False})
    assert r.status_code == 200, r.text
    assert 'DRAFT model "split" is split into 2 files' in await refused("split")
    assert 'DRAFT model "nowhere" not found' in await refused("nowhere")
    missing = "sha256:" + "0" * 64
    assert "not found; upload it first" in await refused({"x.gguf": missing})


async def test_a_base_pulled_from_hf_is_checked_after_the_pull(
    client: httpx.AsyncClient, store: Store, hub: Any, tiny_gguf: Path
) -> None:
    tiny = await upload(client, tiny_gguf)  # tinymodel's vocabulary, not the hub model's
    r = await create(
        client,
        {"model": "pulled", "from": "hf.co/someone/Tiny-GGUF:Q8_0", "draft": {"tiny.gguf": tiny}},
    )
    assert r.status_code == 200  # the check waits for the base, past the response's start
    assert "does not share the model's vocabulary" in ndjson(r.text)[-1]["error"]
    assert not store.manifests.exists(parse_name("pulled"))


def test_modelfile_draft_line_round_trips() -> None:
    mf = parse("FROM ./model.gguf\ndraft tiny-draft:latest\n")
    assert mf.draft == "tiny-draft:latest"
    assert parse(to_text(mf)).draft == "tiny-draft:latest"
    assert parse("FROM x\nDRAFT ./small.gguf\n").draft == "./small.gguf"
    with pytest.raises(Exception, match="only one DRAFT line"):
        parse("FROM x\nDRAFT a.gguf\nDRAFT b.gguf\n")


async def test_requests_draft_by_default_on_a_model_with_a_draft(
    app: FastAPI, client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    small = make_tiny_model(tmp_path / "small", attention=True, name="small.gguf")
    assert (await make(client, "tiny-draft", small)).status_code == 200
    assert (await make(client, "fast", tiny_gguf, draft="tiny-draft")).status_code == 200
    assert (await make(client, "plain", tiny_gguf)).status_code == 200
    svc = app.state.inference
    fast, plain = svc.target("fast"), svc.target("plain")
    assert fast.spec.draft == str(store.blobs.path(draft_layers(store, "fast")[0][0]))
    assert fast.spec.draft_info == read_model_info(small)  # for the planner
    assert plain.spec.draft is None
    assert fast.spec.key != plain.spec.key  # with and without a draft: two loads

    def asked(target: Any, options: dict[str, Any] | None) -> tuple[str, int, int, float]:
        c = svc.prepare(target, "abc", options, None).completion
        return c.draft_mode, c.draft_tokens, c.draft_min, c.draft_p_min

    assert asked(fast, None) == ("draft", 16, 0, 0.75)
    assert asked(fast, {"draft_max": 4, "draft_min": 2, "draft_p_min": 0.5}) == ("draft", 4, 2, 0.5)
    assert asked(fast, {"speculative": "ngram"}) == ("ngram", 16, 0, 0.0)
    assert asked(fast, {"speculative": "off"})[1] == 0
    assert asked(plain, None) == ("auto", 16, 0, 0.0)  # prompt lookup where it pays

    # Refused before anything loads.
    body = {"model": "plain", "prompt": "abc", "stream": False}
    r = await client.post("/api/generate", json={**body, "options": {"speculative": "draft"}})
    assert r.status_code == 400
    assert r.json()["error"] == (
        'model "plain:latest" has no draft model (add a DRAFT line to its Modelfile)'
    )
    r = await client.post(
        "/api/generate", json={**body, "model": "fast", "options": {"draft_p_min": 2}}
    )
    assert r.status_code == 400 and "draft_p_min" in r.json()["error"]
