"""Importing an Ollama store (``ModelService.import_ollama``) on stores laid out as Ollama
writes them (tests/support/ollamastore.py): hard links, copies, broken entries, names, no-ops,
and the Ollama store's bytes and mtimes never changing."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from localllm.errors import InvalidRequest, NotFound
from localllm.models.service import ModelService
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from localllm.store.ollama_import import ImportReport
from localllm.store.ollama_store import find_store
from tests.support.models import import_gguf
from tests.support.ollamastore import (
    IMAGE,
    NAMES,
    PARAMS_A,
    SYSTEM_A,
    TEMPLATE_A,
    TEMPLATE_HF,
    OllamaStore,
    snapshot,
    three_models,
)
from tests.support.tinylora import make_tiny_lora
from tests.support.tinymodel import make_tiny_model


@pytest.fixture
def ollama(tmp_path: Path) -> OllamaStore:
    return three_models(tmp_path / "ollama", tmp_path / "work")


def run(root: Path | None, **kw: Any) -> ImportReport:
    return ModelService(Store()).import_ollama(root, **kw)


def statuses(report: ImportReport) -> dict[str, str]:
    return {m.name: m.status for m in report.models}


def reasons(report: ImportReport) -> dict[str, str]:
    return {m.name: m.reason for m in report.models}


def warnings(report: ImportReport) -> dict[str, list[str]]:
    return {m.name: m.warnings for m in report.models}


def blob_files(store: Store) -> set[str]:
    return {p.name for p in store.blobs.root.iterdir()} if store.blobs.root.is_dir() else set()


def test_every_model_comes_over_hard_linked_and_the_ollama_store_is_untouched(
    ollama: OllamaStore,
) -> None:
    before = snapshot(ollama.root)
    report = run(ollama.root)
    assert statuses(report) == {n: "imported" for n in NAMES}
    store = Store()
    assert sorted(e.name.display for e in store.list()) == sorted(NAMES)
    digests = ollama.digests()
    assert (report.linked, report.copied, report.copied_bytes) == (len(digests), 0, 0)
    assert report.seconds < 1.0, report.seconds
    for digest in digests:  # the same file, not a copy of it
        ours, theirs = store.blobs.path(digest).stat(), ollama.blob_path(digest).stat()
        assert (ours.st_ino, ours.st_dev) == (theirs.st_ino, theirs.st_dev)

    shown = ModelService(store).show("llama3.2")
    assert (shown["template"], shown["system"]) == (TEMPLATE_A, SYSTEM_A)
    assert shown["license"].startswith("MIT License")
    assert '"s"' in shown["parameters"] and "num_ctx" in shown["parameters"]
    assert store.params(store.get(parse_name("llama3.2"))) == PARAMS_A
    assert shown["details"]["family"] == "llama"
    assert "vision" in ModelService(store).show("someuser/tiny-vision:v1")["capabilities"]
    hf = store.get(parse_name("hf.co/someone/Tiny-GGUF:Q8_0"))
    assert store.template(hf) == TEMPLATE_HF  # the legacy "prompt" layer is our template
    assert len(store.adapter_paths(hf)) == 1
    assert not any(ly.media_type.endswith(".embed") for ly in hf.manifest.layers)
    hf_result = next(m for m in report.models if m.name.startswith("hf.co"))
    assert any("embed layer" in w for w in hf_result.warnings)

    # Removing the models here removes our names for the files, not Ollama's.
    for name in NAMES:
        store.delete(parse_name(name))
    assert blob_files(store) == set()
    assert snapshot(ollama.root) == before


def test_a_second_import_is_a_no_op_that_says_so(ollama: OllamaStore) -> None:
    run(ollama.root)
    store = Store()
    manifests = {e.name.display: (e.digest, e.modified) for e in store.list()}
    before = snapshot(ollama.root)
    again = run(ollama.root)
    assert statuses(again) == {n: "unchanged" for n in NAMES}
    assert (again.linked, again.copied) == (0, 0)
    assert {e.name.display: (e.digest, e.modified) for e in store.list()} == manifests
    assert snapshot(ollama.root) == before


def test_a_different_model_of_the_same_name_is_kept_unless_forced(
    ollama: OllamaStore, tmp_path: Path
) -> None:
    store = Store()
    mine = import_gguf(
        store,
        parse_name("llama3.2"),
        [make_tiny_model(tmp_path / "mine")],
        template="{{ .Prompt }}!",
    )
    report = run(ollama.root)
    assert statuses(report)["llama3.2:latest"] == "failed"
    assert (
        "already has a different model named llama3.2:latest" in reasons(report)["llama3.2:latest"]
    )
    assert "--force" in reasons(report)["llama3.2:latest"]
    assert statuses(report)["someuser/tiny-vision:v1"] == "imported"
    assert report.failed
    assert store.get(parse_name("llama3.2")).digest == mine.digest

    dry = run(ollama.root, force=True, dry_run=True)
    assert statuses(dry)["llama3.2:latest"] == "would import"
    assert "would replace the model of that name (--force)" in warnings(dry)["llama3.2:latest"]
    assert store.get(parse_name("llama3.2")).digest == mine.digest
    forced = run(ollama.root, force=True)
    assert "replaced the model of that name (--force)" in warnings(forced)["llama3.2:latest"]
    assert statuses(forced)["llama3.2:latest"] == "imported"
    entry = store.get(parse_name("llama3.2"))
    assert store.template(entry) == TEMPLATE_A
    # The old template's blob went with the manifest that used it.
    old_template = mine.manifest.first(Media.TEMPLATE)
    assert old_template is not None and not store.blobs.exists(old_template.digest)
    assert not forced.failed


def test_broken_entries_are_reported_and_skipped(ollama: OllamaStore, tmp_path: Path) -> None:
    o = ollama
    gguf = make_tiny_model(tmp_path / "broken-work")
    good = o.layer("model", gguf)
    outside = tmp_path / "outside"
    outside.mkdir()

    def model(path: str, layers: list[dict[str, Any]], **cfg: Any) -> None:
        o.manifest(f"registry.ollama.ai/library/{path}/latest", o.config(**cfg), layers)

    absent = b"never written"
    model(
        "missing",
        [
            {
                "mediaType": IMAGE + "model",
                "size": len(absent),
                "digest": "sha256:" + hashlib.sha256(absent).hexdigest(),
            }
        ],
    )
    # Weights whose bytes do not hash to their name (found when linked); the config is
    # this model's own, so the clean-up of what a failed model brought in shows.
    data = gguf.read_bytes()
    wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    o.blob_path(wrong).write_bytes(data)
    model(
        "baddigest",
        [{"mediaType": IMAGE + "model", "digest": wrong, "size": len(data)}],
        file_type="Q4_0",
    )
    bad_text = o.text("template", "{{ .Prompt }} and more")
    o.blob_path(bad_text["digest"]).write_bytes(b"{{ .Prompt }} and then")
    model("badtext", [good, bad_text])
    model("unknowntype", [good, o.layer("weird", b"?")])
    o.manifest("registry.ollama.ai/library/notjson/latest", {}, [], raw=b"{not json")
    (outside / "manifest").write_bytes(
        (o.root / "manifests/registry.ollama.ai/library/llama3.2/latest").read_bytes()
    )
    escape = o.root / "manifests/registry.ollama.ai/library/escape"
    escape.mkdir()
    (escape / "latest").symlink_to(outside / "manifest")
    # A blob that is a symlink out of the store, to a file of the right content and digest.
    elsewhere = b"an outside file"
    (outside / "blob").write_bytes(elsewhere)
    edigest = "sha256:" + hashlib.sha256(elsewhere).hexdigest()
    o.blob_path(edigest).symlink_to(outside / "blob")
    model(
        "blobescape",
        [good, {"mediaType": IMAGE + "license", "digest": edigest, "size": len(elsewhere)}],
    )
    model("tensors", [o.layer("tensor", b"\x01" * 8, name="model.embed_tokens.weight")])
    model("cloud", [], remote_host="https://ollama.com:443", remote_model="big")
    fifo = "sha256:" + hashlib.sha256(b"fifo").hexdigest()
    os.mkfifo(o.blob_path(fifo))
    model("fifo", [{"mediaType": IMAGE + "model", "digest": fifo, "size": 0}])
    model("notgguf", [o.layer("model", b"GGUF but not really" * 10)])
    model("size", [{**good, "size": good["size"] + 1}])
    model("nomodel", [o.text("system", "hello")])
    model("adapterasmodel", [o.layer("model", make_tiny_lora(tmp_path / "lora"))])
    model("modelasadapter", [good, o.layer("adapter", gguf)])
    o.manifest("registry.ollama.ai/library/bad name!/latest", o.config(), [good])
    o.manifest("registry.ollama.ai/library/evil\x1b[2J/latest", o.config(), [good])
    # A symlink that stays inside the store is only another name for a manifest.
    alias = o.root / "manifests/registry.ollama.ai/library/alias"
    alias.mkdir()
    (alias / "latest").symlink_to("../llama3.2/latest")
    before = snapshot(o.root)

    report = run(o.root)
    got = {m.name: (m.status, m.reason) for m in report.models}
    expect = {
        "missing:latest": "is missing",
        "baddigest:latest": "does not match its digest",
        "badtext:latest": "does not match its digest",
        "unknowntype:latest": "unknown layer media type 'application/vnd.ollama.image.weird'",
        "notjson:latest": "the manifest is not valid JSON",
        "escape:latest": "a symlink pointing out of the Ollama store",
        "blobescape:latest": "is a symlink pointing out of the Ollama store",
        "tensors:latest": "safetensors",
        "fifo:latest": "is not a regular file",
        "notgguf:latest": "its model layer is not a GGUF localllm can read",
        "size:latest": f"is {good['size']} bytes, the manifest says {good['size'] + 1}",
        "nomodel:latest": "it has no GGUF model layer",
        "adapterasmodel:latest": "its model layer is a LoRA adapter",
        "modelasadapter:latest": "its adapter layer is not a LoRA adapter",
        "bad name!:latest": "not a valid model name",
        "evil?[2J:latest": "not a valid model name",  # no escape sequence reaches a terminal
    }
    for name, fragment in expect.items():
        assert got[name][0] == "failed" and fragment in got[name][1], (name, got.get(name))
    assert got["cloud:latest"][0] == "skipped" and "cloud model" in got["cloud:latest"][1]
    for name in [*NAMES, "alias:latest"]:
        assert got[name] == ("imported", ""), name
    assert report.failed

    store = Store()
    assert sorted(e.name.display for e in store.list()) == sorted([*NAMES, "alias:latest"])
    # Nothing a failed model brought in stays behind, and no temp file either.
    referenced = {d.replace(":", "-") for d in store.manifests.referenced()}
    assert blob_files(store) == referenced
    assert snapshot(o.root) == before


def test_copies_are_verified_with_progress(ollama: OllamaStore) -> None:
    events: list[dict[str, Any]] = []
    report = run(ollama.root, copy=True, progress=events.append)
    digests = ollama.digests()
    assert statuses(report) == {n: "imported" for n in NAMES}
    assert (report.linked, report.copied, report.link_note) == (0, len(digests), "--copy")
    assert report.copied_bytes == sum(ollama.blob_path(d).stat().st_size for d in digests)
    store = Store()
    for digest in digests:
        ours = store.blobs.path(digest)
        assert ours.stat().st_ino != ollama.blob_path(digest).stat().st_ino
        assert "sha256:" + hashlib.sha256(ours.read_bytes()).hexdigest() == digest
    done = {e["digest"] for e in events if e["completed"] == e["total"]}
    assert done == digests
    assert all(e["status"].startswith("copying ") for e in events)


def test_another_filesystem_falls_back_to_copies(
    ollama: OllamaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second filesystem is not at hand in every test run: link() answers as across one.
    calls = []

    def cross_device(src: Any, dst: Any) -> None:
        calls.append(src)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr("localllm.store.ollama_import.os.link", cross_device)
    report = run(ollama.root)
    assert statuses(report) == {n: "imported" for n in NAMES}
    assert (report.linked, report.copied) == (0, len(ollama.digests()))
    assert report.link_note == "the two stores are on different filesystems"
    assert len(calls) == 1  # tried once: the other blobs are on the same other filesystem


def test_a_copy_that_does_not_verify_or_fit_leaves_nothing(
    ollama: OllamaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(
        (ollama.root / "manifests/registry.ollama.ai/library/llama3.2/latest").read_bytes()
    )
    digest = doc["layers"][0]["digest"]  # the weights, which all three models use
    before = snapshot(ollama.root)
    path = ollama.blob_path(digest)
    # Flip one byte past the header, keeping size and mtime: only the hash can tell.
    stamp = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    report = run(ollama.root, copy=True)
    assert set(statuses(report).values()) == {"failed"}  # all three use those weights
    assert all("does not match its digest" in r for r in reasons(report).values())
    assert blob_files(Store()) == set()

    path.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert snapshot(ollama.root) == before
    monkeypatch.setenv("LOCALLLM_MIN_FREE_DISK", "1000000T")
    full = run(ollama.root, copy=True)
    assert all("not enough disk space" in r for r in reasons(full).values()), reasons(full)
    assert blob_files(Store()) == set()


def test_dry_run_changes_nothing(ollama: OllamaStore) -> None:
    before = snapshot(ollama.root)
    report = run(ollama.root, dry_run=True)
    assert statuses(report) == {n: "would import" for n in NAMES}
    assert (report.linked, report.copied) == (len(ollama.digests()), 0)
    assert Store().list() == [] and blob_files(Store()) == set()
    assert snapshot(ollama.root) == before


def test_one_model_by_name(ollama: OllamaStore) -> None:
    report = run(ollama.root, models=["llama3.2", "someuser/tiny-vision:V1"])
    assert statuses(report) == {
        "llama3.2:latest": "imported",
        "someuser/tiny-vision:v1": "imported",
    }
    missing = run(ollama.root, models=["gemma3"])
    assert (statuses(missing), reasons(missing)) == (
        {"gemma3:latest": "failed"},
        {"gemma3:latest": "not in the Ollama store"},
    )


def test_what_will_not_work_as_in_ollama_is_a_warning(ollama: OllamaStore, tmp_path: Path) -> None:
    o = ollama
    o.manifest(
        "registry.ollama.ai/library/odd/latest",
        o.config(renderer="harmony", parser="harmony"),
        [
            o.layer("model", make_tiny_model(tmp_path / "odd")),
            o.text("template", "{{ if .System }}unclosed"),
            o.text("params", {"stop": ["x"], "mirostat_weird": 1, "top_p": 7}),
            o.layer("draft", make_tiny_model(tmp_path / "odd")),
        ],
    )
    report = run(o.root, models=["odd"])
    result = report.models[0]
    assert result.status == "imported"
    text = "\n".join(result.warnings)
    assert 'parameter "mirostat_weird" is not supported here and is ignored' in text
    assert '"top_p"' in text
    assert "invalid TEMPLATE" in text
    assert 'built-in "harmony" renderer' in text
    entry = Store().get(parse_name("odd"))
    assert entry.manifest.first(Media.DRAFT) is not None  # Ollama's draft layer is our DRAFT
    assert entry.manifest.first(Media.PARAMS) is not None


def test_ollamas_default_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = OllamaStore(tmp_path / "custom")
    monkeypatch.setenv("OLLAMA_MODELS", f' "{store.root}" ')  # Ollama trims both
    assert find_store(None) == store.root
    monkeypatch.delenv("OLLAMA_MODELS")
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    system = tmp_path / "usr-share-ollama"
    monkeypatch.setattr("localllm.paths.OLLAMA_SYSTEM_MODELS", system)
    with pytest.raises(NotFound) as missing:
        find_store(None)
    assert str(home / ".ollama" / "models") in missing.value.message
    assert "localllm import ollama PATH" in missing.value.message
    if sys.platform.startswith("linux"):  # the system service exists on Linux only
        OllamaStore(system)
        assert find_store(None) == system
    user = OllamaStore(home / ".ollama" / "models")
    assert find_store(None) == user.root  # the user's own store comes first
    assert find_store(home / ".ollama") == user.root  # given the folder above it
    with pytest.raises(NotFound, match="is not an Ollama model store"):
        find_store(tmp_path)


def test_localllms_own_store_is_not_imported_into_itself(
    ollama: OllamaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no LOCALLLM_MODELS, OLLAMA_MODELS moves our store too (config.MODELS).
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama.root))
    before = snapshot(ollama.root)
    with pytest.raises(InvalidRequest, match="localllm's own model store"):
        run(None)
    assert snapshot(ollama.root) == before
    # The models are there already: Ollama's layout is ours.
    assert sorted(e.name.display for e in Store().list()) == sorted(NAMES)
    assert Store().get(parse_name("llama3.2")).manifest.first(Media.MODEL) is not None


@pytest.mark.parametrize("who", ["group-writable", "world-writable", "another account"])
def test_a_blob_others_can_write_is_copied_not_linked(ollama: OllamaStore, who: str) -> None:
    digests = sorted(ollama.digests())
    shared = ollama.blob_path(digests[0])
    if who == "another account":
        if os.geteuid() != 0:  # only root can give a file away; the modes cover the rest
            pytest.skip("needs root to chown a file to another account")
        os.chown(shared, 12345, 12345)
    else:
        shared.chmod(0o664 if who == "group-writable" else 0o646)
    report = run(ollama.root)
    assert statuses(report) == {n: "imported" for n in NAMES}
    assert (report.linked, report.copied) == (len(digests) - 1, 1)
    assert report.copied_bytes == shared.stat().st_size
    assert report.link_note == "blobs that another account owns or may write are copied, not linked"
    store = Store()
    ours = store.blobs.path(digests[0]).stat()
    assert ours.st_ino != shared.stat().st_ino  # a file of our own, which they cannot change
    assert ours.st_uid == os.geteuid() and not ours.st_mode & 0o022
    for digest in digests[1:]:
        assert store.blobs.path(digest).stat().st_ino == ollama.blob_path(digest).stat().st_ino
    # A dry run says the same before anything is done.
    for name in NAMES:
        store.delete(parse_name(name))
    dry = run(ollama.root, dry_run=True)
    assert (dry.linked, dry.copied) == (len(digests) - 1, 1)
