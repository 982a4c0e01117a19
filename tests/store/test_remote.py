"""Remote GGUF headers over HTTP range requests (store/remote.py) against the Hub stand-in."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from localllm.errors import InvalidModelFile
from localllm.gguf.info import read_model_info, read_model_info_split
from localllm.store import hub, remote
from localllm.store.local import Store
from tests.support.ggufmeta import SHAPES, write_gguf, write_split_gguf
from tests.support.hubstub import HubStub

MiB = 1 << 20
REPO = "someone/Big-GGUF"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    remote.clear_cache()


def _files(repo: str) -> list[hub.HubFile]:
    return [f for f in hub.list_repo(repo) if f.path.endswith(".gguf")]


def test_an_8b_header_is_read_with_a_few_mb_and_matches_the_local_reader(
    hubstub: HubStub, tmp_path: Path, store: Store
) -> None:
    path = write_gguf(tmp_path / "m-Q4_K_M.gguf", SHAPES["8b"], "Q4_K_M")  # 4.9 GB, sparse
    hubstub.add_file(REPO, "m-Q4_K_M.gguf", path, sha256="ab" * 32)
    info, got = remote.read_model_info(REPO, _files(REPO))
    assert info == read_model_info(path)
    # The key/values, a 128k-token vocabulary and 291 tensor descriptors: no more.
    assert got.bytes_read == hubstub.served["m-Q4_K_M.gguf"]
    assert got.bytes_read < 8 * MiB < path.stat().st_size // 500
    # Every answer was a range; nothing reached the store.
    assert all(r.range for r in hubstub.requests if r.path.startswith("/cdn/"))
    assert [p for p in store.root.rglob("*") if p.is_file()] == []


def test_a_second_read_comes_from_the_cache(hubstub: HubStub, tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", SHAPES["0.5b"], "Q8_0")
    hubstub.add_file(REPO, "m.gguf", path, sha256="01" * 32)
    first = remote.read_headers(REPO, _files(REPO))
    again = remote.read_headers(REPO, _files(REPO))
    assert first.bytes_read > 0 and again.bytes_read == 0 and again.requests == 0
    assert again.headers[0] is first.headers[0]


def test_every_shard_of_a_split_model_is_read(hubstub: HubStub, tmp_path: Path) -> None:
    paths = write_split_gguf(tmp_path, "m-Q8_0", SHAPES["1b"], "Q8_0", n_splits=3)
    for i, p in enumerate(paths):
        hubstub.add_file(REPO, p.name, p, sha256=f"{i:02d}" * 32)
    files = sorted(_files(REPO), key=lambda f: f.path)
    info, got = remote.read_model_info(REPO, files)
    assert info == read_model_info_split(paths)
    assert len(got.headers) == 3
    assert all(hubstub.served[p.name] > 0 for p in paths)
    assert got.bytes_read < sum(p.stat().st_size for p in paths) // 50


def test_a_private_repo_sends_the_token_to_the_hub_but_not_to_the_cdn(
    hubstub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(tmp_path / "m.gguf", SHAPES["0.5b"], "Q8_0")
    hubstub.add_file(REPO, "m.gguf", path, sha256="02" * 32)
    hubstub.private[REPO] = "secret"
    monkeypatch.setenv("HF_TOKEN", "secret")
    remote.read_model_info(REPO, _files(REPO))
    resolve = [r for r in hubstub.requests if "/resolve/" in r.path]
    cdn = [r for r in hubstub.requests if r.path.startswith("/cdn/")]
    assert resolve and cdn
    assert all(r.auth == "Bearer secret" for r in resolve)
    assert all(r.auth is None for r in cdn)


def _hostile_vocabulary(path: Path, count: int) -> Path:
    """A GGUF whose only key is a vocabulary of ``count`` empty strings: a valid header of
    ``8 * count`` bytes (the file is sparse: empty strings are zero bytes)."""
    key = b"tokenizer.ggml.tokens"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    head += struct.pack("<IIQ", 9, 8, count)
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + 8 * count + 64)
    return path


def test_a_header_too_large_to_check_is_refused_after_a_bounded_read(
    hubstub: HubStub, tmp_path: Path
) -> None:
    path = _hostile_vocabulary(tmp_path / "evil.gguf", 1 << 24)  # 128 MiB of "vocabulary"
    hubstub.add_file(REPO, "evil.gguf", path, sha256="cd" * 32)
    with pytest.raises(remote.HeaderTooLarge, match="more than 32 MiB"):
        remote.read_headers(REPO, _files(REPO))
    assert hubstub.served["evil.gguf"] <= remote.MAX_HEADER_BYTES


def test_a_malformed_header_is_the_readers_error(hubstub: HubStub) -> None:
    hubstub.add_file(REPO, "junk.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0) + bytes(64))
    with pytest.raises(InvalidModelFile, match="absurd tensor count"):
        remote.read_headers(REPO, _files(REPO))


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("ignore_range", "answered 200 to a range request"),
        ("lie_total", "Content-Range"),
        ("extra_bytes", "more than the"),
    ],
)
def test_hub_answers_that_do_not_match_the_request_are_refused(
    hubstub: HubStub, tmp_path: Path, fault: str, message: str
) -> None:
    path = write_gguf(tmp_path / "m.gguf", SHAPES["8b"], "Q4_K_M")
    hubstub.add_file(REPO, "m.gguf", path, sha256="ef" * 32)
    if fault == "lie_total":
        hubstub.lie_total["m.gguf"] = 1 << 20
    else:
        getattr(hubstub, fault).add("m.gguf")
    with pytest.raises(remote.RemoteReadError, match=message):
        remote.read_headers(REPO, _files(REPO))
    # A server that ignores the range still costs only what the socket buffered.
    assert hubstub.served.get("m.gguf", 0) < 16 * MiB


def test_a_missing_file_is_an_error_not_a_download(hubstub: HubStub) -> None:
    hubstub.add_repo(REPO)
    with pytest.raises(remote.RemoteReadError, match="not found"):
        remote.read_headers(REPO, [hub.HubFile("gone.gguf", 1 << 30, "aa" * 32)])
