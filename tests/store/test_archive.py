"""Store archives (``store/archive.py``, ``store/archive_import.py``) and ``store/verify.py``:
two models exported and imported into a second store come back identical; a cut copy
is finished by a second run; hostile archives are refused with nothing listed;
verify finds damage and repair pulls it again from the Hub stand-in."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localllm.models.service import ModelService
from localllm.store import archive_blob
from localllm.store.archive import TABLE, ArchiveError
from localllm.store.archive_export import export_models, write_file
from localllm.store.archive_import import ArchiveReport, Truncated, import_archive
from localllm.store.local import Store
from localllm.store.manifests import MAX_MANIFEST_BYTES, Media
from localllm.store.names import ModelName, parse_name
from localllm.store.pull import pull_model
from localllm.store.verify import repair, verify
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub
from tests.support.models import add_model

Items = list[tuple[tarfile.TarInfo, bytes]]


@pytest.fixture
def two(store: Store, tmp_path: Path) -> bytes:
    """The archive of two models of the test's store, ``tiny`` and ``other``."""
    add_model(store, tmp_path, "tiny:latest")
    # A license of some size: the largest blob, cut halfway in the resume test.
    long_license = "".join(f"clause {i}: no warranty.\n" for i in range(8000))
    add_model(store, tmp_path, "ns/other:v1", system="Be brief.", license_text=long_license)
    return export(store, "tiny", "ns/other:v1")


def export(store: Store, *names: str) -> bytes:
    out = io.BytesIO()
    export_models(store, [parse_name(n) for n in names], out)
    return out.getvalue()


class Pipe(io.RawIOBase):
    """Bytes as a pipe gives them: read only, no seeking."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        chunk = self.data.read(min(len(b), 4096))
        b[: len(chunk)] = chunk
        return len(chunk)


def into(target: Store, data: bytes, *, pipe: bool = False, **kw: Any) -> ArchiveReport:
    source: Any = Pipe(data) if pipe else io.BytesIO(data)
    return import_archive(target, source, seekable=not pipe, **kw)


def shown(service: ModelService, name: str) -> dict[str, Any]:
    """``show`` with the store's own folder left out (the Modelfile's FROM names the blob)."""
    out: dict[str, Any] = dict(service.show(name, verbose=True))
    out["modelfile"] = out["modelfile"].replace(str(service.store.blobs.root), "<blobs>")
    assert "<blobs>/sha256-" in out["modelfile"]
    return out


def blob_files(store: Store) -> list[str]:
    root = store.blobs.root
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def members(data: bytes) -> tuple[dict[str, Any], Items]:
    """The archive's table (parsed) and its other members with their bytes."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        items = [(m, (tar.extractfile(m) or io.BytesIO()).read()) for m in tar.getmembers()]
    return json.loads(items[0][1]), items[1:]


def info(name: str | tarfile.TarInfo, **attrs: Any) -> tarfile.TarInfo:
    """A new member header: ``name``'s (a copy of it) with ``attrs`` set."""
    new = tarfile.TarInfo(name) if isinstance(name, str) else copy.copy(name)
    for key, value in attrs.items():
        setattr(new, key, value)
    return new


def write(table: dict[str, Any], items: Items) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = json.dumps(table).encode()
        tar.addfile(info(TABLE, size=len(head)), io.BytesIO(head))
        for member, data in items:
            tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return out.getvalue()


@pytest.mark.parametrize("pipe", [False, True], ids=["file", "pipe"])
def test_two_models_come_back_identical(
    store: Store, two: bytes, tmp_path: Path, pipe: bool
) -> None:
    target = Store(tmp_path / "second" / "models")
    report = into(target, two, pipe=pipe)
    assert [(m.name, m.status) for m in report.models] == [
        ("tiny:latest", "imported"),
        ("ns/other:v1", "imported"),
    ]
    assert blob_files(target) == blob_files(store)
    assert (report.copied, report.present) == (len(blob_files(store)), 0)
    ours, theirs = ModelService(store), ModelService(target)
    assert theirs.list_models() == ours.list_models()  # names, digests, sizes, modified
    for name in ("tiny", "ns/other:v1"):
        assert shown(theirs, name) == shown(ours, name)

    again = into(target, two, pipe=pipe)
    assert [m.status for m in again.models] == ["unchanged", "unchanged"]
    assert again.copied == 0


def test_the_archive_is_a_tar_with_its_table_first(store: Store, two: bytes) -> None:
    table, items = members(two)
    names = [m.name for m, _ in items]
    assert [f["name"] for f in table["files"]] == names
    assert names[:2] == [
        "manifests/registry.ollama.ai/library/tiny/latest",
        "manifests/registry.ollama.ai/ns/other/v1",
    ]
    for (info, data), entry in zip(items, table["files"], strict=True):
        assert (info.size, hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
        if info.name.startswith("blobs/"):
            assert info.name == "blobs/sha256-" + entry["sha256"]


def test_import_of_chosen_models_and_a_dry_run(store: Store, two: bytes, tmp_path: Path) -> None:
    target = Store(tmp_path / "second" / "models")
    dry = into(target, two, dry_run=True)
    assert [m.status for m in dry.models] == ["would import", "would import"]
    assert target.list() == [] and blob_files(target) == []
    into(target, two, names=[parse_name("ns/other:v1")])
    assert [e.name.display for e in target.list()] == ["ns/other:v1"]
    with pytest.raises(ArchiveError, match="has no model nope:latest; it holds tiny:latest"):
        into(target, two, names=[parse_name("nope")])


def test_a_different_model_of_the_same_name_refuses_until_force(
    store: Store, two: bytes, tmp_path: Path
) -> None:
    target = Store(tmp_path / "second" / "models")
    add_model(target, tmp_path, "tiny:latest", system="Something else.")
    before = target.get(parse_name("tiny")).digest
    with pytest.raises(ArchiveError, match="already has a different model named tiny:latest"):
        into(target, two)
    assert [e.name.display for e in target.list()] == ["tiny:latest"]
    assert target.get(parse_name("tiny")).digest == before
    report = into(target, two, force=True)
    assert [m.status for m in report.models] == ["replaced", "imported"]
    assert target.get(parse_name("tiny")).digest == store.get(parse_name("tiny")).digest


def test_force_copies_every_blob_again_and_mends_a_damaged_one(
    store: Store, two: bytes, tmp_path: Path
) -> None:
    target = Store(tmp_path / "second" / "models")
    into(target, two)
    bad = _damage(target, "tiny")
    again = into(target, two)
    assert [m.status for m in again.models] == ["unchanged", "unchanged"]
    assert not all(m.ok for m in verify(target).models)  # same size: the import cannot tell
    mended = into(target, two, force=True)
    assert [m.status for m in mended.models] == ["replaced", "replaced"]
    assert (mended.copied, mended.present) == (len(blob_files(store)), 0)
    assert all(m.ok for m in verify(target).models) and target.blobs.exists(bad)
    assert ModelService(target).list_models() == ModelService(store).list_models()


def _cut(data: bytes, digest_hex: str, keep: int) -> bytes:
    """``data`` cut ``keep`` bytes into the member of blob ``digest_hex``."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.getmember(f"blobs/sha256-{digest_hex}")
    return data[: member.offset_data + keep]


@pytest.mark.parametrize("pipe", [False, True], ids=["file", "pipe"])
def test_a_cut_copy_lists_nothing_and_a_second_run_finishes(
    store: Store, two: bytes, tmp_path: Path, pipe: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read in small pieces, as a large blob is read in 1 MiB ones: a cut loses only the last.
    monkeypatch.setattr(archive_blob, "CHUNK", 256)
    table, _ = members(two)
    files = table["files"]
    at = max(range(len(files)), key=lambda i: files[i]["size"])  # the long license
    cut = files[at]
    assert cut["name"].startswith("blobs/") and cut["size"] > 1024
    target = Store(tmp_path / "second" / "models")
    with pytest.raises(Truncated, match=f"cut short: {len(files) - at} of its {len(files)} files"):
        into(target, _cut(two, cut["sha256"], cut["size"] // 2), pipe=pipe)
    assert target.list() == []
    partial = target.blobs.partial_path(f"sha256:{cut['sha256']}")
    kept = partial.stat().st_size
    assert 0 < kept <= cut["size"] // 2
    before = [n for n in blob_files(target) if not n.endswith("-partial")]
    assert len(before) == at - 2  # the blobs ahead of the cut (after two manifests)

    report = into(target, two, pipe=pipe)
    assert [m.status for m in report.models] == ["imported", "imported"]
    assert (report.present, report.copied) == (at - 2, len(files) - at)
    later = sum(f["size"] for f in files[at + 1 :])
    if pipe:  # a pipe cannot skip: the partial starts again
        assert (report.resumed, report.copied_bytes) == (0, cut["size"] + later)
    else:
        assert (report.resumed, report.resumed_bytes) == (1, kept)
        assert report.copied_bytes == cut["size"] - report.resumed_bytes + later
    assert not partial.exists()
    assert ModelService(target).list_models() == ModelService(store).list_models()


def test_a_bad_partial_is_copied_again(store: Store, two: bytes, tmp_path: Path) -> None:
    table, _ = members(two)
    last = table["files"][-1]
    target = Store(tmp_path / "second" / "models")
    target.blobs.root.mkdir(parents=True)
    target.blobs.partial_path(f"sha256:{last['sha256']}").write_bytes(b"not these bytes")
    report = into(target, two)
    assert report.resumed == 0 and len(target.list()) == 2


def _hostile(case: str, table: dict[str, Any], items: Items) -> None:
    """Make the archive hostile in the way ``case`` names (edits in place)."""
    last, data = items[-1]  # the last blob
    if case == "traversal":
        items.insert(1, (info("../evil", size=1), b"x"))
    elif case == "symlink":
        items[-1] = (info(last, type=tarfile.SYMTYPE, linkname="/etc/passwd", size=0), b"")
    elif case == "hardlink":
        items[-1] = (info(last, type=tarfile.LNKTYPE, linkname=items[-2][0].name, size=0), b"")
    elif case == "device":
        items[-1] = (info(last, type=tarfile.CHRTYPE, size=0), b"")
    elif case == "bad bytes":
        items[-1] = (last, bytes([data[0] ^ 1]) + data[1:])
    elif case == "missing blob":
        del items[-1]
        del table["files"][-1]
    elif case == "duplicate":
        items.append(items[-1])
    elif case == "not listed":
        extra = b"stray"
        name = f"blobs/sha256-{hashlib.sha256(extra).hexdigest()}"
        items.insert(2, (info(name, size=len(extra)), extra))
    elif case == "wrong size":
        items[-1] = (info(last, size=last.size + 1), data + b"x")
    elif case == "oversized manifest":
        table["files"][0]["size"] = MAX_MANIFEST_BYTES + 1
    elif case == "listed twice":
        table["files"].append(table["files"][-1])
    elif case == "absolute name in table":
        table["files"][0]["name"] = "/etc/passwd"


HOSTILE = {
    "traversal": "unsafe path '../evil'",
    "symlink": "is a link \\(to '/etc/passwd'\\)",
    "hardlink": "is a link",
    "device": "is a folder, device, fifo or sparse file",
    "bad bytes": "does not match its digest",
    "missing blob": "which the archive does not hold",
    "duplicate": "is in it twice",
    "not listed": "is not in its table",
    "wrong size": "its table says",
    "oversized manifest": "is too large",
    "listed twice": "lists .* twice",
    "absolute name in table": "neither a manifest nor a blob",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_archives_are_refused_with_nothing_listed(
    store: Store, two: bytes, tmp_path: Path, case: str
) -> None:
    table, items = members(two)
    _hostile(case, table, items)
    target = Store(tmp_path / "second" / "models")
    with pytest.raises(ArchiveError, match=HOSTILE[case]) as caught:
        into(target, write(table, items))
    assert not isinstance(caught.value, Truncated)
    assert target.list() == []
    # Blobs it copied before the refusal are removed again; no partial stays.
    assert blob_files(target) == []


def test_what_is_not_an_archive_says_so(tmp_path: Path) -> None:
    target = Store(tmp_path / "second" / "models")
    with pytest.raises(ArchiveError, match="not a localllm archive"):
        into(target, b"GGUF" + bytes(4096))
    with pytest.raises(ArchiveError, match=r"does not start with localllm-archive\.json"):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            tar.addfile(info("README", size=2), io.BytesIO(b"hi"))
        into(target, out.getvalue())


def _damage(store: Store, name: str, media_type: str = Media.MODEL) -> str:
    layer = store.get(parse_name(name)).manifest.first(media_type)
    assert layer is not None
    path = store.blobs.path(layer.digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return layer.digest


def test_export_of_a_damaged_blob_fails_and_writes_no_file(store: Store, tmp_path: Path) -> None:
    add_model(store, tmp_path, "tiny:latest")
    _damage(store, "tiny")
    out = tmp_path / "out.tar"
    with pytest.raises(ArchiveError, match="does not match its digest: it is damaged"):
        write_file(str(out), lambda fh: export_models(store, [parse_name("tiny")], fh))
    assert list(tmp_path.glob("out.tar*")) == []


def test_verify_finds_damaged_missing_and_resized_blobs(store: Store, tmp_path: Path) -> None:
    for name in "abc":  # three models, no blob shared
        add_model(
            store,
            tmp_path,
            f"{name}:latest",
            system=name.upper(),
            license_text=f"{name} license",
            shape=Shape(name=name),
        )
    assert all(m.ok for m in verify(store).models)
    bad = _damage(store, "a")
    b_system = store.get(parse_name("b")).manifest.first("application/vnd.ollama.image.system")
    c_license = store.get(parse_name("c")).manifest.first("application/vnd.ollama.image.license")
    assert b_system is not None and c_license is not None
    store.blobs.remove(b_system.digest)
    store.blobs.path(c_license.digest).write_bytes(b"longer than it was")
    report = verify(store)
    found = {m.name: m.damaged for m in report.models}
    assert found["a:latest"] == {bad: "its bytes do not match its digest"}
    assert found["b:latest"] == {b_system.digest: "missing"}
    assert found["c:latest"] == {c_license.digest: f"18 bytes, not {c_license.size}"}
    only = verify(store, [parse_name("b")])
    assert [m.name for m in only.models] == ["b:latest"] and not only.models[0].ok


def test_repair_pulls_a_pulled_model_again_and_reports_a_made_one(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    gguf = write_gguf(tmp_path / "t.gguf", Shape(name="tiny"), "Q4_K_M")
    hubstub.add_file("someone/Tiny-GGUF", "tiny-Q4_K_M.gguf", gguf)
    pulled = "hf.co/someone/Tiny-GGUF:Q4_K_M"
    pull_model(store, parse_name(pulled), lambda e: None)
    add_model(store, tmp_path, "made:latest")
    bad = _damage(store, pulled)
    _damage(store, "made")
    report = verify(store)
    assert {m.name for m in report.damaged} == {pulled, "made:latest"}
    served = hubstub.served.get("tiny-Q4_K_M.gguf", 0)

    calls: list[tuple[str, str, str | None]] = []

    def pull(name: ModelName, source: ModelName, projector: str | None, via: str | None) -> None:
        calls.append((name.display, source.display, projector))
        pull_model(store, name, lambda e: None, projector=projector, via=via)

    repair(store, report, pull)
    assert calls == [(pulled, pulled, "none")]
    outcome = {m.name: m.repair for m in report.damaged}
    assert outcome[pulled] == "repaired"
    assert outcome["made:latest"].startswith("not repairable: it has no pull origin")
    assert [m.name for m in report.unrepaired] == ["made:latest"]
    assert hubstub.served.get("tiny-Q4_K_M.gguf", 0) > served  # fetched again
    again = {m.name: m.ok for m in verify(store).models}
    assert again == {pulled: True, "made:latest": False}
    assert store.blobs.exists(bad)


def test_repair_of_a_shared_blob_mends_the_model_that_shares_it(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    gguf = write_gguf(tmp_path / "t.gguf", Shape(name="tiny"), "Q4_K_M")
    hubstub.add_file("someone/Tiny-GGUF", "tiny-Q4_K_M.gguf", gguf)
    pulled = "hf.co/someone/Tiny-GGUF:Q4_K_M"
    pull_model(store, parse_name(pulled), lambda e: None)
    store.copy(parse_name(pulled), parse_name("mine"))  # same manifest, made here
    # A copy shares the config too, so it records the origin: both are pullable.
    _damage(store, pulled)
    report = verify(store)
    pull: Callable[..., Any] = lambda name, source, projector, via: pull_model(  # noqa: E731
        store, name, lambda e: None, source=source, projector=projector, via=via
    )
    repair(store, report, pull)
    assert report.unrepaired == []
    assert all(m.ok for m in verify(store).models)


def test_repair_of_a_model_from_another_origin_pulls_it_by_name(
    store: Store, tmp_path: Path
) -> None:
    from localllm.store.manifests import Layer, Manifest

    gguf = write_gguf(tmp_path / "r.gguf", Shape(name="from the registry"))
    original = gguf.read_bytes()
    digest, size = store.blobs.import_file(gguf)
    origin = {"source": "ollama://someuser/some-model:latest"}
    config = store.put_config({"model_format": "gguf", "origin": origin})
    name = parse_name("someuser/some-model")
    store.commit(name, Manifest(config, [Layer(Media.MODEL, digest, size)]))
    _damage(store, "someuser/some-model")
    calls: list[tuple[Any, ...]] = []

    def pull(name: ModelName, *rest: Any) -> None:
        calls.append((name.display, *rest))
        assert not store.blobs.exists(digest)  # the damaged blob went first
        store.blobs.write_bytes(original)  # as the pull of the name would fetch it

    report = verify(store)
    repair(store, report, pull)
    assert calls == [("someuser/some-model:latest", None, None, None)]
    assert [m.repair for m in report.damaged] == ["repaired"]
    assert all(m.ok for m in verify(store).models)
