"""Pulls from the local Hub stand-in: quant choice, progress, resume, corruption, sharing, auth."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from localllm.errors import (
    DigestMismatch,
    InvalidModelFile,
    InvalidRequest,
    ModelNotFound,
    PullError,
)
from localllm.gguf.info import read_model_info
from localllm.store import download
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from localllm.store.pull import pull_model
from tests.support.ggufmeta import Shape, write_gguf, write_split_gguf
from tests.support.hubstub import HubStub

REPO = "acme/Tiny-GGUF"
TOKENS = ("<unk>", "<s>", "<|im_end|>", *(f"t{i}" for i in range(3, 64)))


def _add(hub: HubStub, tmp: Path, fname: str, layers: int = 2, repo: str = REPO) -> str:
    """Serve a distinct GGUF as ``fname``; returns its sha256 hex."""
    path = write_gguf(
        tmp / f"src-{fname.replace('/', '_')}", Shape(n_layers=layers, tokens=TOKENS, eos_id=2)
    )
    return hub.add_file(repo, fname, path).sha256


def _pull(store: Store, name: str, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    entry = pull_model(store, parse_name(name), events.append, **kw)
    return entry, events


def _store_files(store: Store) -> list[str]:
    return sorted(p.name for p in store.blobs.root.iterdir()) if store.blobs.root.exists() else []


def test_default_quant_progress_and_manifest(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    sha = _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf", layers=3)
    _add(hubstub, tmp_path, "Tiny-Q8_0.gguf")
    _add(hubstub, tmp_path, "mmproj-Tiny-Q4_K_M.gguf")
    entry, events = _pull(store, f"hf.co/{REPO}")
    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest"
    assert "Q4_K_M" in statuses[1] and "default" in statuses[1]
    # The mmproj file here is a llama GGUF, not a projector: it is fetched, then left out.
    assert statuses[-3].startswith("skipping projector mmproj-Tiny-Q4_K_M.gguf: ")
    del statuses[-3]
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    pulls = [e for e in events if e.get("digest") == f"sha256:{sha}"]
    assert pulls and all(e["status"] == f"pulling {sha[:12]}" for e in pulls)
    assert all(e["digest"] == f"sha256:{sha}" for e in pulls)
    size = hubstub.repos[REPO]["Tiny-Q4_K_M.gguf"].size
    assert all(e["total"] == size for e in pulls) and pulls[-1]["completed"] == size
    model = entry.manifest.by_type(Media.MODEL)
    assert [layer.digest for layer in model] == [f"sha256:{sha}"]
    assert read_model_info(store.model_path(entry)).n_layers == 3
    config = store.config_json(entry)
    origin = {
        "source": f"hf.co/{REPO}:Q4_K_M",
        "digest": f"sha256:{sha}",
        "files": [{"file": "Tiny-Q4_K_M.gguf", "digest": f"sha256:{sha}", "size": size}],
    }
    assert config == {
        "model_format": "gguf",
        "model_family": "llama",
        "model_families": ["llama"],
        "model_type": config["model_type"],
        "file_type": "F32",
        "origin": origin,
    }
    assert config["model_type"].endswith("K")
    assert store.params(entry) == {"stop": ["<|im_end|>"]}
    assert entry.manifest.first(Media.TEMPLATE) is None  # the GGUF keeps its own template
    assert not [n for n in _store_files(store) if "partial" in n]
    # A second pull is a cache hit: no new download.
    cdn = hubstub.count("GET", f"/cdn/{sha}")
    _pull(store, f"hf.co/{REPO}:latest")
    assert hubstub.count("GET", f"/cdn/{sha}") == cdn


@pytest.mark.parametrize(
    ("tag", "want"),
    [
        ("q8_0", "Tiny-Q8_0.gguf"),
        ("Q8_0", "Tiny-Q8_0.gguf"),
        ("tiny-q8_0.gguf", "Tiny-Q8_0.gguf"),
        ("IQ3_S-imat", "Tiny-IQ3_S-imat.gguf"),
        ("iq3_s", "Tiny-IQ3_S-imat.gguf"),
        ("latest", "Tiny-Q5_K_M.gguf"),  # no Q4_K_M/Q4_K_S: the fallback order decides
    ],
)
def test_quant_selection(
    hubstub: HubStub, store: Store, tmp_path: Path, tag: str, want: str
) -> None:
    shas = {
        f: _add(hubstub, tmp_path, f, layers=i + 1)
        for i, f in enumerate(
            ["Tiny-Q8_0.gguf", "Tiny-IQ3_S-imat.gguf", "Tiny-Q5_K_M.gguf", "Tiny-Q2_K.gguf"]
        )
    }
    entry, events = _pull(store, f"hf.co/{REPO}:{tag}")
    assert entry.manifest.first(Media.MODEL).digest == f"sha256:{shas[want]}"  # type: ignore[union-attr]
    if tag == "latest":
        assert "fallback" in events[1]["status"]
    assert entry.name.tag == tag


def test_missing_repo_and_missing_quant(hubstub: HubStub, store: Store, tmp_path: Path) -> None:
    _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    _add(hubstub, tmp_path, "Tiny-Q8_0.gguf")
    with pytest.raises(ModelNotFound, match=r"hf\.co/acme/nope not found") as exc:
        _pull(store, "hf.co/acme/nope")
    assert exc.value.status == 404
    with pytest.raises(ModelNotFound, match=r"no file for tag 'Q3_K_M'.*Q4_K_M, Q8_0"):
        _pull(store, f"hf.co/{REPO}:Q3_K_M")
    hubstub.add_repo("acme/empty")
    with pytest.raises(ModelNotFound, match="no GGUF"):
        _pull(store, "hf.co/acme/empty")
    assert store.list() == [] and _store_files(store) == []


def test_an_unreachable_hub_is_a_clear_502(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # huggingface_hub 2 talks through httpx2: its connection errors used to escape as a
    # bare "internal error".  Its own retries (~23 s of back-off) are skipped here.
    import socket

    import huggingface_hub.utils._http as hf_http

    monkeypatch.setattr(hf_http.time, "sleep", lambda s: None)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(PullError, match=f"cannot reach the Hub at http://127.0.0.1:{port}") as exc:
        _pull(store, f"hf.co/{REPO}")
    assert exc.value.status == 502


@pytest.mark.parametrize("status", [403, 501])
def test_hub_errors_keep_their_status(hubstub: HubStub, store: Store, status: int) -> None:
    # (429/500/502/503/504 are retried by huggingface_hub itself for ~20 s first.)
    hubstub.add_repo(REPO)
    hubstub.api_status = status
    with pytest.raises(PullError, match=str(status)) as exc:
        _pull(store, f"hf.co/{REPO}")
    assert exc.value.status == status


def test_interrupted_download_resumes_with_range(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    sha = _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    hubstub.cut_once["Tiny-Q4_K_M.gguf"] = 100_000
    entry, _ = _pull(store, f"hf.co/{REPO}")
    ranges = [r.range for r in hubstub.requests if r.path.startswith("/cdn/")]
    assert ranges[0] is None and ranges[1] is not None
    offset = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < offset <= 100_000
    assert hashlib.sha256(store.model_path(entry).read_bytes()).hexdigest() == sha


def test_failed_pull_keeps_partial_and_next_pull_resumes(
    hubstub: HubStub, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    monkeypatch.setattr(download, "RETRIES", 0)
    hubstub.cut_once["Tiny-Q4_K_M.gguf"] = 150_000
    with pytest.raises(PullError, match="giving up"):
        _pull(store, f"hf.co/{REPO}")
    assert store.list() == []
    partial = store.blobs.partial_path(f"sha256:{sha}")
    assert 0 < partial.stat().st_size <= 150_000
    have = partial.stat().st_size
    entry, _ = _pull(store, f"hf.co/{REPO}")
    assert hubstub.requests[-1].range == f"bytes={have}-"
    assert hashlib.sha256(store.model_path(entry).read_bytes()).hexdigest() == sha
    assert not partial.exists()


def test_corrupted_download_leaves_nothing(hubstub: HubStub, store: Store, tmp_path: Path) -> None:
    _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    hubstub.corrupt.add("Tiny-Q4_K_M.gguf")
    with pytest.raises(DigestMismatch, match="digest mismatch"):
        _pull(store, f"hf.co/{REPO}")
    assert _store_files(store) == []
    assert store.list() == []


def test_stale_corrupt_partial_is_recovered(hubstub: HubStub, store: Store, tmp_path: Path) -> None:
    sha = _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    partial = store.blobs.partial_path(f"sha256:{sha}")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"garbage" * 100)
    with pytest.raises(DigestMismatch):
        _pull(store, f"hf.co/{REPO}")
    assert not partial.exists()
    entry, _ = _pull(store, f"hf.co/{REPO}")  # the next try starts clean
    assert hashlib.sha256(store.model_path(entry).read_bytes()).hexdigest() == sha


def test_not_a_gguf_is_refused_and_removed(hubstub: HubStub, store: Store) -> None:
    hubstub.add_file(REPO, "Tiny-Q4_K_M.gguf", b"PK\x03\x04 this is a zip" * 100)
    with pytest.raises(InvalidModelFile, match="magic"):
        _pull(store, f"hf.co/{REPO}")
    assert _store_files(store) == [] and store.list() == []


def test_concurrent_pulls_share_one_download(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    sha = _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf", layers=8)
    hubstub.delay_s = 0.03  # per 64 KiB: the download takes long enough to overlap
    results: dict[str, list[dict[str, Any]]] = {}
    errors: list[BaseException] = []

    def run(tag: str) -> None:
        try:
            results[tag] = _pull(store, f"hf.co/{REPO}:{tag}")[1]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in ("latest", "q4_k_m")]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(30)
    assert not errors
    assert hubstub.count("GET", f"/cdn/{sha}") == 1
    for events in results.values():
        pulls = [e for e in events if e.get("digest") == f"sha256:{sha}"]
        assert len(pulls) >= 2 and pulls[-1]["completed"] == pulls[-1]["total"]
        done = [e["completed"] for e in pulls]
        assert done == sorted(done)
    assert len(store.list()) == 2


def test_progress_is_throttled(hubstub: HubStub, store: Store, tmp_path: Path) -> None:
    _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf", layers=6)
    hubstub.delay_s = 0.005
    start = time.monotonic()
    _, events = _pull(store, f"hf.co/{REPO}")
    elapsed = time.monotonic() - start
    pulls = [e for e in events if "digest" in e]
    assert 2 <= len(pulls) <= elapsed / 0.05 + 3


def test_cancel_keeps_partial_and_no_manifest(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    sha = _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf", layers=6)
    hubstub.delay_s = 0.05
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(PullError, match="cancelled") as exc:
        _pull(store, f"hf.co/{REPO}", cancel=cancel)
    assert exc.value.status == 499
    assert download.wait_idle(5)
    assert store.list() == []
    assert store.blobs.partial_path(f"sha256:{sha}").exists()
    assert not store.blobs.exists(f"sha256:{sha}")


def test_split_gguf_becomes_ordered_layers(hubstub: HubStub, store: Store, tmp_path: Path) -> None:
    shape = Shape(n_layers=4, tokens=TOKENS, eos_id=2)
    shards = write_split_gguf(tmp_path, "Tiny-Q8_0", shape, n_splits=3)
    whole = read_model_info(write_gguf(tmp_path / "whole.gguf", shape))
    for p in reversed(shards):  # listing order must not matter
        hubstub.add_file(REPO, f"Q8_0/{p.name}", p)
    entry, _ = _pull(store, f"hf.co/{REPO}:Q8_0")
    layers = entry.manifest.by_type(Media.MODEL)
    assert [layer.name for layer in layers] == [p.name for p in shards]
    paths = store.model_paths(entry)
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in shards]
    config = store.config_json(entry)
    assert config["model_type"] == whole.parameter_size and config["file_type"] == "F32"


def test_hf_token_is_sent_to_the_hub_only(
    hubstub: HubStub, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    hubstub.private[REPO] = "hf_secret"
    with pytest.raises(ModelNotFound, match="HF_TOKEN"):
        _pull(store, f"hf.co/{REPO}")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    _pull(store, f"hf.co/{REPO}")
    hub_calls = [r for r in hubstub.requests if "/resolve/" in r.path or "/tree/" in r.path]
    assert hub_calls[-1].auth == "Bearer hf_secret" and hub_calls[-2].auth == "Bearer hf_secret"
    cdn = [r for r in hubstub.requests if r.path.startswith("/cdn/")]
    assert cdn and all(r.auth is None for r in cdn)


def test_repo_template_and_params_files_become_layers(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    _add(hubstub, tmp_path, "Tiny-Q4_K_M.gguf")
    hubstub.add_file(REPO, "template", b"{{ .Prompt }}")
    hubstub.add_file(REPO, "params", b'{"temperature": 0.2, "stop": ["END"]}')
    entry, _ = _pull(store, f"hf.co/{REPO}")
    assert store.template(entry) == "{{ .Prompt }}"
    assert store.params(entry) == {"temperature": 0.2, "stop": ["END"]}
    assert entry.manifest.first(Media.PARAMS) is not None


def test_only_hf_names_can_be_pulled(store: Store) -> None:
    with pytest.raises(InvalidRequest, match="only Hugging Face"):
        pull_model(store, parse_name("llama3"), lambda e: None)
