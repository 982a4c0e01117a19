"""What one search may cost (issue 36 §1): Hub requests bounded by ``limit``, nothing of it
left running after its deadline, and one device probe for a burst of searches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from localllm.api.wire import SearchResponse
from localllm.errors import LocalLLMError
from localllm.hardware import detect
from localllm.models import remote as models_remote, search as models_search
from localllm.models.remote import Machine
from localllm.scheduler.planner import PlanOptions
from localllm.store import remote, search as hub_search
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub
from tests.support.shapes import cpu

TOKEN = "hf_test_token_search_bounds"
SLACK_S = 1.0  # past the deadline, for a loaded machine


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    remote.clear_cache()
    models_remote.forget_machine()
    yield
    models_remote.forget_machine()


def _repo(stub: HubStub, folder: Path, repo: str, *, downloads: int = 1) -> None:
    name = repo.split("/")[1]
    gguf = write_gguf(folder / f"{repo.replace('/', '_')}.gguf", Shape(n_layers=2), "Q8_0")
    stub.add_file(repo, f"{name}-Q8_0.gguf", gguf)
    stub.set_meta(repo, downloads=downloads)


def _bound(limit: int) -> int:
    return 1 + hub_search.REQUESTS_PER_RESULT * limit


def _authed(stub: HubStub) -> list[str]:
    return [r.path for r in list(stub.requests) if r.auth == f"Bearer {TOKEN}"]


def test_limit_bounds_the_hub_requests_whatever_the_catalogue_matches(
    hubstub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    for i in range(6):
        _repo(hubstub, tmp_path, f"hub{i}/model-{i}-GGUF", downloads=100 - i)
    # Sixty catalogue names with an "e": a few repos the Hub has, most it has not.
    entries = [(f"name{i}:e", f"cat{i % 20}/entry-{i}-GGUF") for i in range(60)]
    for i in range(3):
        _repo(hubstub, tmp_path, f"cat{i}/entry-{i}-GGUF")
    repos = hub_search.search("e", 1, catalog=lambda: entries)
    assert len(repos) == 1
    sent = len(hubstub.requests)
    assert 0 < sent <= _bound(1), [r.path for r in hubstub.requests]
    assert len(_authed(hubstub)) <= _bound(1)
    # No catalogue repo beyond the one result was looked up.
    looked_up = {r.path for r in hubstub.requests if r.path.startswith("/api/models/cat")}
    assert len({"/".join(p.split("/")[3:5]) for p in looked_up}) <= 1


def test_the_route_catalogue_query_e_with_limit_1_stays_bounded(
    hubstub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The library catalogue itself: dozens of its names hold an "e", and none of its
    # repos is on the stand-in (each lookup is a 404).
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert sum("e" in name for name, _ in models_search.catalog_entries()) > 20
    _repo(hubstub, tmp_path, "someone/e-GGUF")
    machine = Machine((cpu(64),), PlanOptions())
    out = models_search.search("e", 1, lambda: machine)
    assert len(out["models"]) <= 1
    assert len(hubstub.requests) <= _bound(1), [r.path for r in hubstub.requests]
    assert len(_authed(hubstub)) <= _bound(1)


def test_a_held_search_gives_up_at_its_deadline(hubstub: HubStub, tmp_path: Path) -> None:
    _repo(hubstub, tmp_path, "someone/tiny-GGUF")
    hubstub.search_gate = threading.Event()
    start = time.monotonic()
    try:
        with pytest.raises(LocalLLMError):
            hub_search.search("tiny", 3, deadline_s=0.5)
        took = time.monotonic() - start
    finally:
        hubstub.search_gate.set()
    assert took < 0.5 + SLACK_S


def _search_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t not in before and t.name.startswith("hub-search") and t.is_alive()
    ]


def test_nothing_of_a_search_runs_after_its_deadline(hubstub: HubStub, tmp_path: Path) -> None:
    delay = 1.5
    for i in range(6):
        repo = f"r{i}/tiny-{i}-GGUF"
        _repo(hubstub, tmp_path, repo, downloads=10 - i)
        hubstub.api_delay_s[repo] = delay  # every tree listing outlasts the deadline
    before = set(threading.enumerate())
    start = time.monotonic()
    repos = hub_search.search("tiny", 6, deadline_s=0.5)
    took = time.monotonic() - start
    sent = len(hubstub.requests)
    assert took < 0.5 + SLACK_S
    assert len(repos) == 6 and all(r.quants is None and r.info is None for r in repos)
    # Returned only once its workers stopped: none is left waiting on the Hub.
    assert _search_threads(before) == []
    # The stand-in answers the held listings by now; a worker that outlived the search
    # would follow with header reads.  None may reach the Hub.
    end = start + delay + 1.0
    while time.monotonic() < end:
        assert len(hubstub.requests) == sent, [r.path for r in hubstub.requests[sent:]]
        time.sleep(0.05)


def test_a_burst_of_searches_probes_the_devices_once(
    hubstub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _repo(hubstub, tmp_path, "someone/tiny-GGUF")
    real = detect.refresh_memory
    probes: list[float] = []

    def slow_probe(*args: object, **kw: object) -> detect.Hardware:
        probes.append(time.monotonic())
        time.sleep(0.2)  # what a probe child costs, roughly
        return real()

    monkeypatch.setattr(detect, "refresh_memory", slow_probe)
    models_remote.forget_machine()
    go = threading.Barrier(12)

    def machine() -> Machine:
        go.wait(10)
        return models_remote.this_machine()

    def search() -> SearchResponse:
        go.wait(10)
        return models_search.search("tiny", 1, models_remote.this_machine, catalog=list)

    with ThreadPoolExecutor(12) as pool:
        machines = [pool.submit(machine) for _ in range(8)]
        searches = [pool.submit(search) for _ in range(4)]
        assert all(f.result(timeout=30).devices for f in machines)
        assert all(len(f.result(timeout=30)["models"]) == 1 for f in searches)
    assert len(probes) == 1, f"{len(probes)} probes for one burst"
    # Another probe only once the answer is forgotten (or MACHINE_TTL_S has passed).
    models_remote.this_machine()
    assert len(probes) == 1
    models_remote.forget_machine()
    models_remote.this_machine()
    assert len(probes) == 2
