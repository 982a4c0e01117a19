"""Pulling by library name (``llama3.2``) through ``ModelService``, against the Hub stand-in:
stored under the typed name, its origin recorded, local models never replaced; ``create
FROM`` a library name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localllm import paths
from localllm.errors import InvalidRequest, ModelNotFound
from localllm.modelfile.create import CreateSpec, Creator
from localllm.models.service import ModelService
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub, add_vision_repo
from tests.support.models import import_gguf

USER_CATALOG = """
[models."llama3.2"]
tags."3b" = "hf.co/someone/Tiny-GGUF:Q4_K_M"
tags."1b" = "hf.co/someone/Tiny-GGUF:Q8_0"

[models.seer]
latest = "4b"
tags."4b" = { source = "hf.co/someone/Seer-GGUF:Q8_0", projector = "F32" }
"""


@pytest.fixture
def svc(hubstub: HubStub, tmp_path: Path) -> ModelService:
    for quant, layers in (("Q4_K_M", 2), ("Q8_0", 3)):
        gguf = write_gguf(tmp_path / f"tiny-{quant}.gguf", Shape(n_layers=layers), quant)
        hubstub.add_file("someone/Tiny-GGUF", f"tiny-{quant}.gguf", gguf)
    add_vision_repo(hubstub, tmp_path / "seer", "someone/Seer-GGUF")
    user = paths.user_catalog()
    user.parent.mkdir(parents=True)
    user.write_text(USER_CATALOG)
    return ModelService(Store())


def pull(svc: ModelService, name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    svc.pull(name, events.append)
    return events


def test_a_library_name_is_stored_as_typed_and_shows_its_origin(
    svc: ModelService, hubstub: HubStub
) -> None:
    events = pull(svc, "llama3.2")
    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest"
    assert statuses[1] == (
        "llama3.2:latest is hf.co/someone/Tiny-GGUF:Q4_K_M (catalogue entry llama3.2:3b)"
    )
    assert statuses[-1] == "success"
    assert [m["name"] for m in svc.list_models()] == ["llama3.2:latest"]
    sha = hubstub.repos["someone/Tiny-GGUF"]["tiny-Q4_K_M.gguf"].sha256
    origin = svc.show("llama3.2")["origin"]
    assert origin == {
        "source": "hf.co/someone/Tiny-GGUF:Q4_K_M",
        "catalog": "llama3.2:3b",
        "digest": f"sha256:{sha}",
        "files": [
            {
                "file": "tiny-Q4_K_M.gguf",
                "digest": f"sha256:{sha}",
                "size": hubstub.repos["someone/Tiny-GGUF"]["tiny-Q4_K_M.gguf"].size,
            }
        ],
    }
    # The digest is the blob's: the store holds exactly the file the Hub lists.
    entry = svc.store.get(parse_name("llama3.2"))
    assert entry.manifest.first(Media.MODEL).digest == f"sha256:{sha}"  # type: ignore[union-attr]
    # Another tag is another name; the same file is not fetched twice.
    fetched = hubstub.count("GET", "/cdn/")
    pull(svc, "llama3.2:3b")
    assert hubstub.count("GET", "/cdn/") == fetched
    assert sorted(m["name"] for m in svc.list_models()) == ["llama3.2:3b", "llama3.2:latest"]
    pull(svc, "llama3.2:1b-instruct-q4_K_M")  # Ollama's long tag: the 1b entry, other quant
    origin = svc.show("llama3.2:1b-instruct-q4_K_M")["origin"]
    assert (origin["source"], origin["catalog"]) == (
        "hf.co/someone/Tiny-GGUF:Q4_K_M",
        "llama3.2:1b-instruct-q4_k_m",
    )


def test_hf_pulls_record_their_origin_too(svc: ModelService) -> None:
    pull(svc, "hf.co/someone/Tiny-GGUF")
    origin = svc.show("hf.co/someone/Tiny-GGUF")["origin"]
    # "latest" became the quant it chose: the source pulls the same file again.
    assert origin["source"] == "hf.co/someone/Tiny-GGUF:Q4_K_M" and "catalog" not in origin


def test_the_catalogue_projector_choice_is_used(svc: ModelService, hubstub: HubStub) -> None:
    pull(svc, "seer")
    entry = svc.store.get(parse_name("seer:latest"))
    layer = entry.manifest.first(Media.PROJECTOR)
    assert layer is not None and layer.name == "mmproj-Tiny-F32.gguf"
    origin = svc.show("seer")["origin"]
    assert origin["projector"]["file"] == "mmproj-Tiny-F32.gguf"
    assert origin["source"] == "hf.co/someone/Seer-GGUF:Q8_0"


def test_unknown_names_fail_before_any_request_to_the_hub(
    svc: ModelService, hubstub: HubStub
) -> None:
    for name, match in (
        ("lama3.2", "closest: llama3.2"),
        ("llama3.2:70b", "has no tag '70b'"),
        ("other.host/ns/model", "not in the catalogue"),
    ):
        with pytest.raises(ModelNotFound, match=match):
            svc.pull(name, lambda e: None)
    assert hubstub.requests == []
    assert svc.list_models() == []


def test_a_local_model_of_the_same_name_is_never_replaced(
    svc: ModelService, tmp_path: Path, hubstub: HubStub
) -> None:
    mine = write_gguf(tmp_path / "mine.gguf", Shape(name="mine", n_layers=4))
    import_gguf(svc.store, parse_name("llama3.2"), [mine])
    before = svc.store.get(parse_name("llama3.2")).digest
    with pytest.raises(InvalidRequest, match="made here, not pulled") as err:
        svc.pull("llama3.2", lambda e: None)
    assert err.value.status == 409
    assert svc.store.get(parse_name("llama3.2")).digest == before
    assert hubstub.requests == []
    # A pulled one is updated by pulling again, as in Ollama.
    pull(svc, "llama3.2:1b")
    pull(svc, "llama3.2:1b")
    assert "origin" in svc.show("llama3.2:1b")


def test_create_from_a_library_name_pulls_it_first(svc: ModelService) -> None:
    creator = Creator(svc.store, lambda m, emit, cancel: svc.pull(m, emit, cancel=cancel))
    plan = creator.plan(CreateSpec(model="helper", from_="llama3.2:1b", system="Be brief."))
    assert plan.pull == "llama3.2:1b"
    events: list[dict[str, Any]] = []
    creator.run(plan, events.append)
    assert events[-1]["status"] == "success"
    names = sorted(m["name"] for m in svc.list_models())
    assert names == ["helper:latest", "llama3.2:1b"]
    assert svc.show("helper")["system"] == "Be brief."
    # A name the catalogue lacks is refused at plan time, with the closest names.
    with pytest.raises(
        ModelNotFound,
        match=r'FROM model "lama3.2" not found.*closest in the '
        r"catalogue: llama3.2",
    ):
        creator.plan(CreateSpec(model="x", from_="lama3.2"))
    # A model in the store wins over the catalogue.
    plan = creator.plan(CreateSpec(model="y", from_="helper"))
    assert plan.pull is None and plan.base is not None
