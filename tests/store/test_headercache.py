"""The cache of Hub GGUF headers (store/headercache.py): keyed by what was read, capped in bytes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.gguf.reader import read_header
from localllm.store import headercache, hub, remote
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    headercache.cache.clear()
    yield
    headercache.cache.clear()


def _gguf(folder: Path, name: str, layers: int, label: str = "tiny-test") -> Path:
    shape = Shape(name=label, n_layers=layers, n_embd=128, n_ff=256, n_vocab=256)
    return write_gguf(folder / name, shape)


def _listed(repo: str) -> list[hub.HubFile]:
    return [f for f in hub.list_repo(repo) if f.path.endswith(".gguf")]


def test_a_second_read_costs_one_range_request(hubstub: HubStub, tmp_path: Path) -> None:
    hubstub.add_file("a/m-GGUF", "m.gguf", _gguf(tmp_path, "m.gguf", 3))
    files = _listed("a/m-GGUF")
    first = headercache.read_headers("a/m-GGUF", files)
    again = headercache.read_headers("a/m-GGUF", files)
    assert again.headers[0] is first.headers[0]
    assert again.requests == 1 and again.bytes_read <= remote.MIN_FETCH


def test_the_key_is_what_was_read_not_what_the_listing_said(
    hubstub: HubStub, tmp_path: Path
) -> None:
    # Two versions of one size: only their content tells them apart.
    v1 = _gguf(tmp_path, "v1.gguf", 2, "version-1")
    v2 = _gguf(tmp_path, "v2.gguf", 2, "version-2")
    hubstub.add_file("a/moving-GGUF", "m.gguf", v1)
    (stale,) = _listed("a/moving-GGUF")  # lists v1's sha256
    hubstub.add_file("a/moving-GGUF", "m.gguf", v2)  # main moves on before the read
    got = headercache.read_headers("a/moving-GGUF", [stale])
    assert got.headers[0].kv["general.name"] == "version-2"  # v2 was read: that is what we know
    # Another repo really holds v1 (the sha256 the stale listing named): it reads as v1.
    hubstub.add_file("b/honest-GGUF", "m.gguf", v1)
    (honest,) = _listed("b/honest-GGUF")
    assert honest.sha256 == stale.sha256
    got = headercache.read_headers("b/honest-GGUF", [honest])
    assert got.headers[0].kv["general.name"] == "version-1"


def test_the_cache_is_capped_in_bytes_least_recently_used_first(
    hubstub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repos = [f"a/m{i}-GGUF" for i in range(3)]
    for i, repo in enumerate(repos):
        hubstub.add_file(repo, "m.gguf", _gguf(tmp_path, f"m{i}.gguf", 2, f"model-{i}"))
    one = headercache.footprint(read_header(tmp_path / "m2.gguf"))  # each costs the same
    monkeypatch.setattr(headercache.cache, "max_bytes", 2 * one + one // 2)
    monkeypatch.setattr(headercache, "MAX_ENTRY", 2 * one)
    files = {repo: _listed(repo) for repo in repos}
    for repo in repos[:2]:
        headercache.read_headers(repo, files[repo])
    headercache.read_headers(repos[0], files[repos[0]])  # m0 used again: m1 is older now
    headercache.read_headers(repos[2], files[repos[2]])  # over the cap: m1 goes
    assert len(headercache.cache) == 2
    assert headercache.cache.bytes <= headercache.cache.max_bytes
    # The kept ones first: reading m1 back evicts the least recently used again.
    order = [repos[0], repos[2], repos[1]]
    again = {repo: headercache.read_headers(repo, files[repo]).requests for repo in order}
    assert again[repos[0]] == 1 and again[repos[2]] == 1  # hits: one range request
    assert again[repos[1]] > 1  # evicted: read again


def test_a_header_without_a_strong_etag_is_not_cached(hubstub: HubStub, tmp_path: Path) -> None:
    # Files kept in git are served by ``resolve`` itself; here with a weak ETag.
    hubstub.add_file("a/git-GGUF", "m.gguf", _gguf(tmp_path, "m.gguf", 2), lfs=False)
    files = _listed("a/git-GGUF")
    real = hubstub.repos["a/git-GGUF"]["m.gguf"]
    real.git_oid = f'W/"{real.git_oid}"'  # sent as it is: a weak ETag
    headercache.read_headers("a/git-GGUF", files)
    assert len(headercache.cache) == 0
