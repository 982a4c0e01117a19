"""Pulls from Ollama's registry through ``ModelService``, against the registry stand-in:
where names resolve, every layer stored and in use, the header checked before the
download, digests verified, and a model from the registry (or imported from Ollama)
updated by a later pull instead of refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localllm import paths
from localllm.errors import DigestMismatch, InvalidModelFile, InvalidRequest, ModelNotFound
from localllm.models.service import ModelService
from localllm.store import download
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.models import import_gguf
from tests.support.ollamastore import OllamaStore
from tests.support.registrystub import MANIFEST_TYPE, RegistryStub
from tests.support.tinymodel import make_tiny_model

GO_TEMPLATE = "{{ range .Messages }}{{ .Role }}:{{ .Content }}{{ end }}"
PARAMS = {"num_predict": 3, "stop": ["</s>"]}
USER_CATALOG = """
[models.echo]
latest = "tiny"
tags.tiny = "hf.co/someone/Echo-GGUF:Q4_K_M"
"""


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryStub]:
    stub = RegistryStub(tmp_path / "registry").start()
    monkeypatch.setenv("LOCALLLM_OLLAMA_REGISTRY", stub.url)
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)
    try:
        yield stub
    finally:
        assert download.wait_idle(10.0), "a download thread outlived its test"
        stub.stop()


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    return make_tiny_model(tmp_path / "tiny", chat_template=None)


def pull(svc: ModelService, name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    svc.pull(name, events.append)
    return events


def leftovers(store: Store) -> list[str]:
    root = store.blobs.root
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_a_community_name_comes_with_every_layer(registry: RegistryStub, gguf: Path) -> None:
    registry.add_model(
        "someuser/some-reranker",
        gguf,
        template=GO_TEMPLATE,
        params=PARAMS,
        system="Be brief.",
        license="MIT License",
    )
    svc = ModelService(Store())
    events = pull(svc, "someuser/some-reranker")
    statuses = [e["status"] for e in events]
    digest = registry.model_digest("someuser/some-reranker")
    assert statuses[:3] == [
        "pulling manifest",
        "someuser/some-reranker:latest is ollama://someuser/some-reranker:latest "
        "(not in the catalogue: from Ollama's registry)",
        "reading the model's header (range requests, before downloading it)",
    ]
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    done = [e for e in events if e.get("digest") == digest]
    assert done and done[-1]["completed"] == done[-1]["total"] == gguf.stat().st_size
    manifest_asks = [r for r in registry.requests if "/manifests/" in r.path]
    assert manifest_asks[0].path == "/v2/someuser/some-reranker/manifests/latest"
    assert manifest_asks[0].accept == MANIFEST_TYPE

    shown = svc.show("someuser/some-reranker")
    assert (shown["template"], shown["system"]) == (GO_TEMPLATE, "Be brief.")
    assert shown["license"] == "MIT License"
    assert "num_predict" in shown["parameters"] and '"</s>"' in shown["parameters"]
    assert svc.store.params(svc.store.get(parse_name("someuser/some-reranker"))) == PARAMS
    assert shown["origin"]["source"] == "ollama://someuser/some-reranker:latest"
    assert shown["origin"]["registry"] == registry.url
    assert shown["details"]["family"] == "llama"
    entry = svc.store.get(parse_name("someuser/some-reranker"))
    assert entry.manifest.first(Media.MODEL).digest == digest  # type: ignore[union-attr]
    assert svc.store.blobs.path(digest).read_bytes() == gguf.read_bytes()
    # Every blob the manifest names is in the store, and nothing else is.
    assert sorted(d.replace(":", "-") for d in entry.manifest.digests()) == leftovers(svc.store)


def test_a_library_name_the_catalogue_lacks_goes_to_the_registry(
    registry: RegistryStub, gguf: Path
) -> None:
    registry.add_model("brandnew9:7b", gguf, params=PARAMS)
    svc = ModelService(Store())
    target = svc.pull_target("brandnew9:7b")
    assert target.registry is not None
    assert target.via == "not in the catalogue: from Ollama's registry"
    assert pull(svc, "brandnew9:7b")[-1]["status"] == "success"
    assert [m["name"] for m in svc.list_models()] == ["brandnew9:7b"]
    assert registry.requests[0].path == "/v2/library/brandnew9/manifests/7b"
    # Neither here nor there: the catalogue's one line, saying so.
    with pytest.raises(ModelNotFound) as missing:
        svc.pull_target("brandnew9:8b")
    assert "is not in the catalogue nor in Ollama's registry" in missing.value.message
    assert "\n" not in missing.value.message


def test_ollama_scheme_forces_the_registry(
    registry: RegistryStub, gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = paths.user_catalog()
    user.parent.mkdir(parents=True)
    user.write_text(USER_CATALOG)
    registry.add_model("echo", gguf, template=GO_TEMPLATE)
    svc = ModelService(Store())
    assert svc.pull_target("echo").registry is None  # the catalogue comes first
    events = pull(svc, "ollama://echo")
    assert events[1]["status"] == (
        "echo:latest is ollama://echo:latest (ollama:// names Ollama's registry)"
    )
    assert svc.show("echo")["template"] == GO_TEMPLATE
    with pytest.raises(InvalidRequest, match="Hugging Face name"):
        svc.pull_target("ollama://hf.co/someone/Echo-GGUF")
    with pytest.raises(ModelNotFound, match="not in Ollama's registry"):
        svc.pull_target("ollama://nothere")
    monkeypatch.setenv("LOCALLLM_OLLAMA_REGISTRY", "off")
    with pytest.raises(InvalidRequest, match="LOCALLLM_OLLAMA_REGISTRY"):
        svc.pull_target("ollama://echo")


def test_registry_off_leaves_the_catalogue_error_as_it_was(
    registry: RegistryStub, gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.add_model("brandnew9", gguf)
    monkeypatch.setenv("LOCALLLM_OLLAMA_REGISTRY", "off")
    with pytest.raises(ModelNotFound) as missing:
        ModelService(Store()).pull_target("brandnew9")
    assert missing.value.message.startswith("model 'brandnew9' is not in the catalogue. ")
    assert registry.requests == []


def test_an_unknown_architecture_is_refused_before_its_download(
    registry: RegistryStub, tmp_path: Path
) -> None:
    big = Shape(arch="ollamaonly", n_layers=8, n_embd=256, n_ff=512)
    model = write_gguf(tmp_path / "odd.gguf", big)
    size = model.stat().st_size
    assert size > 16 << 20
    registry.add_model("someuser/odd", model, template=GO_TEMPLATE)
    registry.add_model("someuser/gemma3", model)
    svc = ModelService(Store())
    with pytest.raises(InvalidModelFile) as refused:
        pull(svc, "someuser/odd")
    message = refused.value.message
    assert message == (
        "ollama://someuser/odd:latest is a 'ollamaonly' model, an architecture the pinned "
        "llama.cpp cannot load (it is built for Ollama's own engine)"
    )
    assert refused.value.status == 400
    served = registry.served.get(registry.model_digest("someuser/odd"), 0)
    # The header's ranges only (the reader reads ahead a MiB at a time), not the weights.
    assert 0 < served < size // 8
    assert svc.list_models() == [] and leftovers(svc.store) == []
    # A family the catalogue has: its entry is offered.
    with pytest.raises(InvalidModelFile, match=r"; .*: localllm pull gemma3$"):
        pull(svc, "someuser/gemma3")


def test_a_digest_mismatch_is_refused_and_leaves_nothing(
    registry: RegistryStub, gguf: Path
) -> None:
    registry.add_model("someuser/broken", gguf, template=GO_TEMPLATE, params=PARAMS)
    registry.corrupt.add(registry.model_digest("someuser/broken"))
    svc = ModelService(Store())
    with pytest.raises(DigestMismatch, match="digest mismatch"):
        pull(svc, "someuser/broken")
    assert svc.list_models() == []
    assert leftovers(svc.store) == []  # no blob, no partial, no temp file


def test_a_model_from_the_registry_is_updated_by_a_second_pull(
    registry: RegistryStub, gguf: Path, tmp_path: Path
) -> None:
    registry.add_model("someuser/chat", gguf, params={"num_predict": 3})
    svc = ModelService(Store())
    pull(svc, "someuser/chat")
    registry.add_model("someuser/chat", gguf, params={"num_predict": 5})
    assert pull(svc, "someuser/chat")[1]["status"].endswith("(where it was pulled from before)")
    assert svc.store.params(svc.store.get(parse_name("someuser/chat"))) == {"num_predict": 5}
    # A model made here is still refused, registry or not.
    import_gguf(svc.store, parse_name("someuser/mine"), [gguf])
    registry.add_model("someuser/mine", gguf)
    with pytest.raises(InvalidRequest, match="made here") as made:
        svc.pull_target("someuser/mine")
    assert made.value.status == 409


def test_a_model_imported_from_ollama_is_updated_not_refused(
    registry: RegistryStub, gguf: Path, tmp_path: Path
) -> None:
    ollama = OllamaStore(tmp_path / "ollama")
    ollama.manifest(
        "registry.ollama.ai/library/mine/latest",
        ollama.config(),
        [ollama.layer("model", gguf), ollama.text("params", {"num_predict": 2})],
    )
    svc = ModelService(Store())
    report = svc.import_ollama(ollama.root)
    assert [(m.name, m.status) for m in report.models] == [("mine:latest", "imported")]
    config = svc.store.config_json(svc.store.get(parse_name("mine")))
    assert config["origin"]["source"] == "ollama://mine:latest"
    assert config["model_family"] == "llama"  # Ollama's own fields kept
    assert svc.show("mine")["origin"]["source"] == "ollama://mine:latest"
    again = svc.import_ollama(ollama.root)
    assert [m.status for m in again.models] == ["unchanged"]

    registry.add_model("mine", gguf, params={"num_predict": 4})
    events = pull(svc, "mine")
    assert events[1]["status"] == (
        "mine:latest is ollama://mine:latest (where it was pulled from before)"
    )
    assert svc.store.params(svc.store.get(parse_name("mine"))) == {"num_predict": 4}
    origin = svc.store.config_json(svc.store.get(parse_name("mine")))["origin"]
    assert origin["registry"] == registry.url and "imported" not in origin


def test_a_cloud_model_and_safetensors_are_refused_before_any_download(
    registry: RegistryStub, gguf: Path
) -> None:
    registry.add_model("someuser/mlx", gguf, extra=(("application/vnd.ollama.image.tensor", b"x"),))
    cfg = registry.blob(json.dumps({"remote_host": "https://ollama.com:443"}).encode())
    registry.manifests["library/cloudy:latest"] = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **cfg},
            "layers": [],
        }
    ).encode()
    svc = ModelService(Store())
    with pytest.raises(InvalidRequest, match="safetensors"):
        svc.pull_target("someuser/mlx")
    with pytest.raises(InvalidRequest, match="cloud model"):
        svc.pull_target("cloudy")
    assert registry.blob_requests() == []


def test_a_dry_run_and_the_fit_check_read_only_the_header(
    registry: RegistryStub, tmp_path: Path
) -> None:
    from localllm.models.remote import Machine, TooBig
    from localllm.scheduler.planner import PlanOptions
    from tests.support.shapes import cpu

    model = write_gguf(tmp_path / "big.gguf", Shape(n_layers=8, n_embd=256, n_ff=512))
    registry.add_model("someuser/big", model, template=GO_TEMPLATE)
    svc = ModelService(Store())
    events: list[dict[str, Any]] = []
    roomy = Machine((cpu(64),), PlanOptions())
    svc.pull("someuser/big", events.append, machine=lambda: roomy, dry_run=True)
    result = events[-1]
    assert result["dry_run"] is True and result["source"] == "ollama://someuser/big:latest"
    assert result["fit"]["status"] != "too_big" and result["details"]["family"] == "llama"
    assert 0 < result["header_bytes"] < model.stat().st_size // 8
    assert result["files"][0]["size"] == model.stat().st_size
    tiny = Machine((cpu(0.001),), PlanOptions())
    with pytest.raises(TooBig, match=r"ollama://someuser/big:latest does not fit .*--force"):
        svc.pull("someuser/big", events.append, machine=lambda: tiny, force=False)
    assert svc.list_models() == [] and leftovers(svc.store) == []
    served = registry.served.get(registry.model_digest("someuser/big"), 0)
    assert served < 2 * result["header_bytes"] + 1  # two header reads, no download


def test_a_pulls_own_rate_cap_holds_for_the_registry_too(
    registry: RegistryStub, gguf: Path
) -> None:
    import time

    registry.add_model("someuser/slow", gguf)
    size, rate = gguf.stat().st_size, 2 << 20
    started = time.monotonic()
    ModelService(Store()).pull("someuser/slow", lambda e: None, max_rate=rate)
    took = time.monotonic() - started
    # A floor, not a speed goal: the cap sleeps; the kernel's buffer lets ~0.5 s ahead.
    assert took >= (size - (512 << 10)) / rate, (took, size)
