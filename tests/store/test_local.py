"""Manifests and the Store: case-insensitive lookup, copy/delete, blob GC, consistency."""

from __future__ import annotations

from pathlib import Path

import pytest

from localllm.errors import BlobNotFound, InvalidRequest, ModelNotFound
from localllm.store.local import Store
from localllm.store.manifests import Layer, Manifest, Media
from localllm.store.names import parse_name


def _model(store: Store, name: str, payload: bytes, *, shards: int = 1) -> Manifest:
    layers = [
        store.put_bytes(Media.MODEL, payload + bytes([i]), name=f"m-{i}.gguf")
        for i in range(shards)
    ]
    layers.append(store.put_json(Media.PARAMS, {"stop": ["<|end|>"]}))
    config = store.put_config({"model_format": "gguf", "tag": name, "w": payload.hex()})
    manifest = Manifest(config, layers)
    store.commit(parse_name(name), manifest)
    return manifest


def test_commit_list_and_case_insensitive_get(store: Store) -> None:
    m = _model(store, "Qwen:Small", b"weights")
    entry = store.get(parse_name("qwen:small"))
    assert entry.manifest == m
    assert entry.name.parts[2:] in (("Qwen", "Small"), ("qwen", "small"))
    assert [e.manifest for e in store.list()] == [m]
    assert store.params(entry) == {"stop": ["<|end|>"]}
    assert store.config_json(entry)["model_format"] == "gguf"
    with pytest.raises(ModelNotFound, match="not found"):
        store.get(parse_name("other"))


def test_model_paths_in_order(store: Store) -> None:
    _model(store, "split", b"w", shards=3)
    entry = store.get(parse_name("split"))
    paths = store.model_paths(entry)
    assert [p.read_bytes() for p in paths] == [b"w\x00", b"w\x01", b"w\x02"]
    assert store.model_path(entry) == paths[0]
    assert [layer.name for layer in entry.manifest.by_type(Media.MODEL)] == [
        "m-0.gguf",
        "m-1.gguf",
        "m-2.gguf",
    ]


def test_model_paths_without_model_layer(store: Store) -> None:
    store.commit(parse_name("empty"), Manifest(store.put_config({}), []))
    with pytest.raises(InvalidRequest, match="no model layer"):
        store.model_paths(store.get(parse_name("empty")))


def test_commit_refuses_missing_blobs(store: Store) -> None:
    config = store.put_config({})
    ghost = Layer(Media.MODEL, "sha256:" + "1" * 64, 10)
    with pytest.raises(BlobNotFound):
        store.commit(parse_name("ghost"), Manifest(config, [ghost]))
    assert store.list() == []


def test_copy_then_delete_keeps_shared_blobs(store: Store) -> None:
    m = _model(store, "a", b"shared")
    store.copy(parse_name("a"), parse_name("b:v2"))
    assert store.get(parse_name("b:v2")).manifest == m
    store.delete(parse_name("a"))
    assert all(store.blobs.exists(d) for d in m.digests())
    store.delete(parse_name("b:v2"))
    assert not any(store.blobs.exists(d) for d in m.digests())
    assert store.list() == []
    # Empty manifest folders are pruned too.
    assert not any(p.is_file() for p in store.manifests.root.rglob("*"))


def test_replacing_a_manifest_drops_only_unused_blobs(store: Store) -> None:
    old = _model(store, "m", b"v1")
    other = _model(store, "keep", b"v1")  # shares blobs with old
    new = _model(store, "m", b"v2")
    assert all(store.blobs.exists(d) for d in other.digests() | new.digests())
    stray = old.digests() - other.digests() - new.digests()
    assert stray == {old.config.digest}  # its config named the tag; the weights are shared
    assert not any(store.blobs.exists(d) for d in stray)


def test_delete_missing_and_copy_missing(store: Store) -> None:
    with pytest.raises(ModelNotFound):
        store.delete(parse_name("nope"))
    with pytest.raises(ModelNotFound):
        store.copy(parse_name("nope"), parse_name("x"))


def test_corrupt_manifests_are_skipped_in_list(store: Store) -> None:
    _model(store, "good", b"g")
    bad = store.manifests.root / "registry.ollama.ai" / "library" / "bad" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"{not json")
    assert [e.name.model for e in store.list()] == ["good"]
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        store.get(parse_name("bad"))


def test_prune_removes_unreferenced_after_grace(store: Store) -> None:
    m = _model(store, "m", b"w")
    orphan = store.blobs.write_bytes(b"orphan")
    assert store.prune(grace_seconds=0) == [orphan]
    assert all(store.blobs.exists(d) for d in m.digests())


def test_noprune_setting(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_NOPRUNE", "1")
    orphan = store.blobs.write_bytes(b"orphan")
    assert store.prune(grace_seconds=0) == []
    assert store.blobs.exists(orphan)


def _dead_pid() -> int:
    import subprocess
    import sys

    with subprocess.Popen([sys.executable, "-c", "pass"]) as child:
        child.wait()
    return child.pid


@pytest.mark.parametrize("noprune", ["0", "1"])
def test_prune_removes_temp_files_of_dead_writers_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, noprune: str
) -> None:
    import os

    monkeypatch.setenv("LOCALLLM_NOPRUNE", noprune)
    _model(store, "m", b"weights")
    dead, alive = _dead_pid(), os.getpid()
    folder = store.manifests.root / "registry.ollama.ai" / "library" / "m"
    debris = [
        store.blobs.root / f".tmp-{dead}-0123abcd",
        folder / f".tmp-{dead}-latest.0123abcd",
        store.manifests.root / "hf.co" / "x" / "y" / f".tmp-{dead}-q4.ab",
    ]
    live = [
        store.blobs.root / f".tmp-{alive}-feedbeef",  # a writer still at work
        folder / f".tmp-{alive}-latest.feedbeef",
        store.blobs.root / ".tmp-deadbeef",  # no pid, young: maybe still written
        store.blobs.partial_path("sha256:" + "a" * 64),
    ]  # resumable download
    for path in debris + live:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"t")
    store.prune()
    assert [p for p in debris if p.exists()] == []
    assert [p for p in live if not p.exists()] == []
    assert not (store.manifests.root / "hf.co").exists()  # emptied folders go too
    assert [e.name.display for e in store.list()] == ["m:latest"]


def test_temp_names_carry_the_writer_pid(store: Store) -> None:
    import os

    from localllm.store.tempfiles import tmp_name

    assert tmp_name().startswith(f".tmp-{os.getpid()}-")
    writer = store.blobs.writer()
    try:
        assert writer.tmp.name.startswith(f".tmp-{os.getpid()}-")
    finally:
        writer.abort()


# -- partial downloads ------------------------------------------------------------------


def _partial(store: Store, n: int, size: int, *, age: float = 3600.0) -> Path:
    import os
    import time

    path = store.blobs.partial_path("sha256:" + f"{n:02x}" * 32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_prune_partials_removes_idle_ones_and_reports_bytes(store: Store) -> None:
    a, b = _partial(store, 1, 100), _partial(store, 2, 23)
    blob = store.blobs.write_bytes(b"complete")
    dry = store.prune_partials(dry_run=True)
    assert dry.freed == 123 and a.exists() and b.exists()
    report = store.prune_partials()
    assert sorted(report.removed) == [(a, 100), (b, 23)] and report.freed == 123
    assert not a.exists() and not b.exists() and store.blobs.exists(blob)
    assert store.prune_partials().removed == []


def test_prune_partials_keeps_one_a_live_process_holds_open(store: Store) -> None:
    held, idle = _partial(store, 1, 10), _partial(store, 2, 20)
    with open(held, "r+b"):
        report = store.prune_partials()
    assert held.exists() and not idle.exists()
    assert report.kept == [(held, "open by a running process")]


def test_prune_partials_keeps_recent_ones_while_the_daemon_runs(store: Store) -> None:
    import os

    recent, old = _partial(store, 1, 10, age=5), _partial(store, 2, 20)
    report = store.prune_partials(daemon_pid=os.getpid())
    assert recent.exists() and not old.exists()
    assert [p for p, _ in report.kept] == [recent]
    # Without a live daemon nobody can be about to reopen it.
    assert store.prune_partials(daemon_pid=2**22 + 1).freed == 10


def test_get_of_a_model_deleted_while_being_read_is_a_404(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = parse_name("gone:latest")
    # Found, then deleted before it is opened: the reader must see "not found", not an OSError.
    monkeypatch.setattr(
        store.manifests, "locate", lambda _n: store.manifests.root / "library" / "gone" / "latest"
    )
    with pytest.raises(ModelNotFound):
        store.get(name)


def test_a_held_blob_outlives_a_delete_until_its_hold_ends(store: Store) -> None:
    manifest = _model(store, "held:latest", b"weights")
    model = manifest.layers[0].digest
    hold = store.hold()
    hold.add(model)  # a pull of the same model, between finding the blob and committing
    store.delete(parse_name("held:latest"))
    assert store.blobs.exists(model)
    assert not store.blobs.exists(manifest.config.digest)  # not held: collected at once
    assert store.prune(grace_seconds=0) == [] and store.blobs.exists(model)
    hold.release()  # the pull failed: nothing uses it, and a delete wanted it gone
    assert not store.blobs.exists(model)


def test_a_held_blob_the_pull_commits_stays(store: Store) -> None:
    manifest = _model(store, "held:latest", b"weights")
    hold = store.hold()
    for digest in manifest.digests():
        hold.add(digest)
    store.delete(parse_name("held:latest"))
    store.commit(parse_name("held:latest"), manifest)  # the pull completes
    hold.release()
    assert all(store.blobs.exists(d) for d in manifest.digests())


def test_put_bytes_holds_before_writing(store: Store) -> None:
    hold = store.hold()
    layer = store.put_json(Media.PARAMS, {"stop": ["x"]}, hold=hold)
    assert layer.digest in hold.digests
    assert store.prune(grace_seconds=0) == []  # held: not garbage even past the grace period
    hold.release()
    assert store.prune(grace_seconds=0) == [layer.digest]
