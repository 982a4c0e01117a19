"""Searches run in their own small pool (issue 36 §1): held searches, more of them than
anyio's default worker threads, leave ``/api/tags``, ``/api/show``, ``/v1/models`` and
``/metrics`` their threads, on a real uvicorn server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from localllm import paths
from localllm.models.remote import Machine
from localllm.scheduler.planner import PlanOptions
from localllm.server import routes_search
from localllm.server.app import create_app
from localllm.store.local import Store
from tests.support.fake_scheduler import fake_scheduler
from tests.support.hubstub import HubStub
from tests.support.live_server import live_server
from tests.support.models import add_model
from tests.support.shapes import cpu

HELD = 42  # anyio's default limiter lends 40 threads
PROMPT_S = 1.0


def _until(ok: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_held_searches_leave_the_other_routes_their_threads(
    hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(paths.models())
    add_model(store, tmp_path)
    here = Machine((cpu(64),), PlanOptions())
    monkeypatch.setattr(routes_search, "this_machine", lambda plans=(): here)
    app = create_app(store, bind_host="127.0.0.1", scheduler=fake_scheduler())
    hub.search_gate = gate = threading.Event()
    answers: list[httpx.Response | BaseException] = []

    with live_server(app) as port:
        url = f"http://127.0.0.1:{port}"

        def search() -> None:
            try:
                answers.append(
                    httpx.get(f"{url}/api/search", params={"q": "Tiny-GGUF"}, timeout=60)
                )
            except BaseException as exc:  # reported below, not lost with the thread
                answers.append(exc)

        searches = [threading.Thread(target=search) for _ in range(HELD)]
        try:
            for t in searches:
                t.start()
            # Every search is inside the app, the first ones held by the Hub.
            _until(lambda: app.state.lifecycle.in_flight >= HELD, "the searches to arrive")
            _until(lambda: hub.search_waiting >= 1, "a search to reach the Hub")
            with httpx.Client(base_url=url, timeout=10) as client:
                for method, path, body in (
                    ("GET", "/api/tags", None),
                    ("POST", "/api/show", {"model": "tiny"}),
                    ("GET", "/v1/models", None),
                    ("GET", "/metrics", None),
                    ("GET", "/health", None),
                ):
                    start = time.perf_counter()
                    r = client.request(method, path, json=body)
                    took = time.perf_counter() - start
                    assert r.status_code == 200, (path, r.text)
                    assert took < PROMPT_S, f"{path} took {took:.2f} s behind held searches"
            # Only the search pool's own threads wait on the Hub.
            assert hub.search_waiting <= routes_search.SEARCH_THREADS
            assert app.state.lifecycle.in_flight >= HELD
        finally:
            gate.set()
            for t in searches:
                t.join(60)
    assert len(answers) == HELD
    failed = [a for a in answers if not isinstance(a, httpx.Response) or a.status_code != 200]
    assert not failed, failed[:3]
    assert all(len(a.json()["models"]) == 1 for a in answers if isinstance(a, httpx.Response))
