"""Vision projectors in pulls: which ``mmproj`` file is taken, the override, and ``show``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localllm.errors import InvalidModelFile, ModelNotFound
from localllm.models.service import ModelService
from localllm.store.hub import HubFile
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from localllm.store.projector import choose_projector, is_loadable_projector
from localllm.store.pull import pull_model
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub, add_vision_repo

REPO = "acme/TinyVision-GGUF"


def _files(*names: str) -> list[HubFile]:
    return [HubFile(n, 10, "0" * 64) for n in names]


@pytest.mark.parametrize(
    "model_label,want",
    [
        ("Q4_K_M", "mmproj-F16.gguf"),  # quantized model: F16
        ("BF16", "mmproj-BF16.gguf"),  # same precision
        ("F32", "mmproj-F32.gguf"),
        ("Q8_0", "mmproj-Q8_0.gguf"),
    ],
)
def test_choice_follows_the_model_precision(model_label: str, want: str) -> None:
    files = _files(
        "model-Q4_K_M.gguf",
        "mmproj-BF16.gguf",
        "mmproj-F16.gguf",
        "mmproj-F32.gguf",
        "mmproj-Q8_0.gguf",
        "README.md",
    )
    got = choose_projector(REPO, files, model_label)
    assert got is not None and got.path == want


def test_choice_fallbacks_folders_and_absence() -> None:
    # No F16: BF16 before F32; lower-case precisions in the name count too.
    got = choose_projector(
        REPO, _files("m-Q4_K_M.gguf", "mmproj-model-f32.gguf", "mmproj-model-bf16.gguf"), "Q4_K_M"
    )
    assert got is not None and got.path == "mmproj-model-bf16.gguf"
    # The model's own folder first.
    files = _files("a/m-Q4_K_M.gguf", "a/mmproj-F32.gguf", "mmproj-F16.gguf")
    got = choose_projector(REPO, files, "Q4_K_M", model_path="a/m-Q4_K_M.gguf")
    assert got is not None and got.path == "a/mmproj-F32.gguf"
    assert choose_projector(REPO, _files("m-Q4_K_M.gguf"), "Q4_K_M") is None


def test_explicit_choice_by_name_label_or_none() -> None:
    files = _files("m-Q4_K_M.gguf", "mmproj-F16.gguf", "mmproj-F32.gguf")
    for requested in ("mmproj-F32.gguf", "MMPROJ-f32.GGUF", "f32"):
        got = choose_projector(REPO, files, "Q4_K_M", requested)
        assert got is not None and got.path == "mmproj-F32.gguf"
    assert choose_projector(REPO, files, "Q4_K_M", "none") is None
    with pytest.raises(ModelNotFound, match=r"no projector 'Q2_K'.*mmproj-F16\.gguf, mmproj-F32"):
        choose_projector(REPO, files, "Q4_K_M", "Q2_K")


def _pull(store: Store, name: str, **kw: Any) -> tuple[Any, list[str]]:
    events: list[dict[str, Any]] = []
    entry = pull_model(store, parse_name(name), events.append, **kw)
    return entry, [e["status"] for e in events]


def test_pull_takes_the_fitting_projector_and_show_says_vision(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    served = add_vision_repo(hubstub, tmp_path / "src", REPO)
    entry, statuses = _pull(store, f"hf.co/{REPO}")
    assert "using projector mmproj-Tiny-F16.gguf" in statuses
    model = entry.manifest.by_type(Media.MODEL)
    proj = entry.manifest.by_type(Media.PROJECTOR)
    assert [x.digest for x in model] == ["sha256:" + served["Tiny-Q4_K_M.gguf"].sha256]
    assert [(x.digest, x.name) for x in proj] == [
        ("sha256:" + served["mmproj-Tiny-F16.gguf"].sha256, "mmproj-Tiny-F16.gguf")
    ]
    # F32 is never downloaded.
    assert hubstub.count("GET", served["mmproj-Tiny-F32.gguf"].sha256) == 0
    svc = ModelService(store)
    shown = svc.show(f"hf.co/{REPO}")
    assert "vision" in shown["capabilities"]
    assert shown["projector_info"]["general.architecture"] == "clip"
    assert shown["projector_info"]["clip.projector_type"] == "mlp"
    listed = {m["name"]: m for m in svc.list_models()}
    size = listed[f"hf.co/{REPO}:latest"]["size"]
    assert size == entry.manifest.total_size
    assert size > served["Tiny-Q4_K_M.gguf"].size + served["mmproj-Tiny-F16.gguf"].size


def test_pull_override_and_none(hubstub: HubStub, store: Store, tmp_path: Path) -> None:
    served = add_vision_repo(hubstub, tmp_path / "src", REPO)
    entry, _ = _pull(store, f"hf.co/{REPO}:Q8_0", projector="mmproj-Tiny-F32.gguf")
    proj = entry.manifest.first(Media.PROJECTOR)
    assert proj is not None and proj.digest == "sha256:" + served["mmproj-Tiny-F32.gguf"].sha256
    entry, statuses = _pull(store, f"hf.co/{REPO}:BF16", projector="none")
    assert entry.manifest.first(Media.PROJECTOR) is None
    assert not any("projector" in s for s in statuses)
    assert "vision" not in ModelService(store).show(f"hf.co/{REPO}:BF16")["capabilities"]
    cdn = hubstub.count("GET", "/cdn/")
    with pytest.raises(ModelNotFound, match="no projector 'Q5_K'"):
        _pull(store, f"hf.co/{REPO}:Q8_0", projector="Q5_K")
    assert hubstub.count("GET", "/cdn/") == cdn  # refused before downloading anything


def test_a_projector_that_is_not_clip_is_skipped_or_refused(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    write_gguf(tmp_path / "model.gguf", Shape())
    hubstub.add_file(REPO, "Tiny-Q4_K_M.gguf", tmp_path / "model.gguf")
    # A llama GGUF named like a projector: libmtmd could not load it.
    hubstub.add_file(
        REPO, "mmproj-Tiny-F16.gguf", write_gguf(tmp_path / "p.gguf", Shape(n_layers=3))
    )
    entry, statuses = _pull(store, f"hf.co/{REPO}")
    assert any(s.startswith("skipping projector mmproj-Tiny-F16.gguf: ") for s in statuses)
    assert entry.manifest.first(Media.PROJECTOR) is None
    assert "vision" not in ModelService(store).show(f"hf.co/{REPO}")["capabilities"]
    with pytest.raises(InvalidModelFile, match="requested projector is not usable"):
        _pull(store, f"hf.co/{REPO}:Q4_K_M", projector="F16")
    assert not is_loadable_projector(tmp_path / "p.gguf")
