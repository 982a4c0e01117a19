"""Hub JSON reads against hostile answers (store/hubhttp.py, used by hub.list_repo and the search):
compressed answers are refused unread, deep nesting is a clear error, next pages stay on the Hub."""

from __future__ import annotations

import logging
import tracemalloc

import pytest

from localllm.errors import PullError
from localllm.store import hub, search as hub_search
from tests.support.hubstub import HubStub

REPO = "someone/Paged-GGUF"
MiB = 1 << 20


@pytest.fixture
def paged(hubstub: HubStub) -> HubStub:
    for i in range(3):
        hubstub.add_file(REPO, f"m-{i}-Q8_0.gguf", b"GGUF" + bytes(60))
    return hubstub


def test_a_gzip_bomb_is_refused_without_inflating_it(paged: HubStub) -> None:
    paged.api_gzip = 256 * MiB  # about 256 KB on the wire
    tracemalloc.start()
    try:
        with pytest.raises(PullError, match=r"compressed \(gzip\) though asked not to") as err:
            hub.list_repo(REPO)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.status == 502
    # Read raw, the answer is never expanded (an inflating reader holds 64 MB a chunk).
    assert peak < 16 * MiB, f"{peak / MiB:.0f} MiB held"
    with pytest.raises(PullError, match="compressed"):
        hub_search.search("paged", 5)


def test_deeply_nested_json_is_a_clear_error(paged: HubStub) -> None:
    paged.api_deep = 200_000
    with pytest.raises(PullError, match="nested too deeply") as err:
        hub.list_repo(REPO)
    assert err.value.status == 502
    with pytest.raises(PullError, match="nested too deeply"):
        hub_search.search("paged", 5)


def test_pages_are_followed_on_the_hub(paged: HubStub) -> None:
    paged.tree_page = 1
    files = hub.list_repo(REPO)
    assert sorted(f.path for f in files) == [f"m-{i}-Q8_0.gguf" for i in range(3)]
    assert paged.count("GET", "/tree/") == 3
    # The search reads at most two pages of a repo's tree.
    paged.requests.clear()
    (repo,) = hub_search.search("paged", 5)
    assert repo.quants is not None and len(repo.quants) == 2
    assert paged.count("GET", "/tree/") == 2


@pytest.mark.parametrize(
    "link",
    [
        "http://localhost:{port}/api/models/someone/Paged-GGUF/tree/main?cursor=1",  # host
        "https://127.0.0.1:{port}/api/models/someone/Paged-GGUF/tree/main?cursor=1",  # scheme
        "http://127.0.0.1:1/api/models/someone/Paged-GGUF/tree/main?cursor=1",  # port
        "{url}/api/models/someone/Other-GGUF/tree/main?cursor=1",  # another repo
        "{url}/api/whoami-v2",  # another API
        "/api/models/someone/Paged-GGUF/tree/main/../../../../../api/whoami-v2",
    ],
)
def test_a_next_page_off_the_hub_is_not_followed(
    paged: HubStub, link: str, caplog: pytest.LogCaptureFixture
) -> None:
    paged.add_file("someone/Other-GGUF", "x.gguf", b"GGUF" + bytes(60))
    paged.tree_next = link.replace("{port}", str(paged.port))
    with caplog.at_level(logging.WARNING, logger="localllm.store.hubhttp"):
        files = hub.list_repo(REPO)
    assert len(files) == 3  # the first page's, and nothing read past it
    assert [r.path for r in paged.requests] == [f"/api/models/{REPO}/tree/main"]
    assert "not following the Hub's next page" in caplog.text
