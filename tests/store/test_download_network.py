"""Downloads that respect the network (issue 37 §3): bandwidth caps measured at their rate,
and a download cut by the network resuming by itself with a backoff, or giving up clearly."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from localllm.errors import PullError
from localllm.store import download, ratelimit
from localllm.store.blobs import BlobStore
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.store.pull import pull_model
from tests.support.hub import padded_gguf
from tests.support.hubstub import HubStub

REPO = "acme/Tiny-GGUF"
RATE = 1 << 20  # 1 MiB/s: the sizes below make each capped test take about 2 s


class Cuts(dict[str, int]):
    """``HubStub.cut_once`` that cuts ``path``'s next answers after each of ``points`` bytes
    in turn (the stand-in pops one point per answer), then lets them through."""

    def __init__(self, path: str, *points: int) -> None:
        super().__init__({path: 0})
        self.points = list(points)

    def pop(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self.points.pop(0) if key in self and self.points else default


Stamps = list[tuple[float, int]]  # (when, bytes completed) of each progress event


def pull(
    store: Store, repo: str = REPO, stamps: Stamps | None = None, **kw: Any
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def got(event: Any) -> None:
        events.append(event)
        if stamps is not None and event.get("completed"):
            stamps.append((time.perf_counter(), event["completed"]))

    pull_model(store, parse_name(f"hf.co/{repo}"), got, **kw)
    return events


def measured(*pulls: Stamps) -> float:
    """The rate the pulls' progress shows, together, from their first bytes to their last:
    the download's, not the listing's and the clients' set-up before it (~0.2 s a pull)."""
    done = sum(s[-1][1] - s[0][1] for s in pulls)
    return done / (max(s[-1][0] for s in pulls) - min(s[0][0] for s in pulls))


def cdn_ranges(hub: HubStub) -> list[str | None]:
    return [r.range for r in hub.requests if r.path.startswith("/cdn/")]


def test_a_capped_pull_keeps_its_rate_across_a_resume(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    f = padded_gguf(hubstub, tmp_path, REPO, 2 * RATE)
    hubstub.cut_once[f.path] = RATE // 2  # the same bucket after the resume: no fresh burst
    stamps: Stamps = []
    events = pull(store, stamps=stamps, max_rate=RATE)
    rate = measured(stamps)
    assert 0.85 * RATE <= rate <= 1.15 * RATE, f"{rate / RATE:.3f} of the cap"
    ranges = cdn_ranges(hubstub)
    assert ranges[0] is None and ranges[1] is not None and len(ranges) == 2
    assert [e["status"] for e in events if "resuming at" in e["status"]]


def test_the_daemon_cap_is_one_bucket_for_parallel_pulls(
    hubstub: HubStub, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_MAX_DOWNLOAD_RATE", "1M")
    monkeypatch.setattr(ratelimit, "_shared", None)  # no tokens left over from another test
    files = [padded_gguf(hubstub, tmp_path, f"acme/Part{i}-GGUF", RATE, pad=i) for i in (1, 2)]
    errors: list[BaseException] = []
    stamps: list[Stamps] = [[], []]

    def one(i: int) -> None:
        try:
            pull(store, f"acme/Part{i + 1}-GGUF", stamps[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert all(s[-1][1] == f.size for s, f in zip(stamps, files, strict=True))
    rate = measured(*stamps)
    assert 0.85 * RATE <= rate <= 1.15 * RATE, f"{rate / RATE:.3f} of the cap"
    assert len(store.list()) == 2


def test_the_bucket_takes_debts_and_stops_when_aborted() -> None:
    bucket = ratelimit.Bucket(1000)
    abort = threading.Event()
    abort.set()
    assert bucket.take(500, abort) is False  # 0.5 s owed: an aborted caller does not wait
    assert ratelimit.for_pull(0) is None and ratelimit.for_pull(None) is None
    with pytest.raises(ValueError):
        ratelimit.Bucket(0)


def test_backoff_doubles_from_one_second_to_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "BACKOFF_S", 1.0)
    assert [download.backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 10, 10, 10]


def test_a_cut_download_resumes_by_itself_with_backoff(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    f = padded_gguf(hubstub, tmp_path, REPO, 400_000)
    # Cut after 100 kB, then twice before any byte: three failures, the last two in a row.
    hubstub.cut_once = Cuts(f.path, 100_000, 0, 0)
    events = pull(store)
    notes = [e["status"] for e in events if "resuming at" in e["status"]]
    assert len(notes) == 3, notes
    assert [n.rsplit("in ", 1)[1] for n in notes] == [
        "0.01 s (retry 1 of 6)",
        "0.02 s (retry 2 of 6)",
        "0.04 s (retry 3 of 6)",
    ]
    assert all(n.startswith(f"{f.sha256[:12]}: connection lost (") for n in notes)
    ranges = cdn_ranges(hubstub)
    assert ranges[0] is None and len(set(ranges[1:])) == 1  # each retry from where it stopped
    offset = int(str(ranges[1]).removeprefix("bytes=").rstrip("-"))
    assert 0 < offset <= 100_000
    entry = store.get(parse_name(f"hf.co/{REPO}"))
    assert hashlib.sha256(store.model_path(entry).read_bytes()).hexdigest() == f.sha256


def test_a_download_that_keeps_failing_gives_up_quickly_and_says_why(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    f = padded_gguf(hubstub, tmp_path, REPO, 400_000)
    hubstub.cut_once = Cuts(f.path, 50_000, *[0] * 20)
    start = time.perf_counter()
    with pytest.raises(PullError) as exc:
        pull(store)
    assert time.perf_counter() - start < 5
    msg = str(exc.value)
    assert exc.value.status == 502
    assert msg.startswith(f"downloading sha256:{f.sha256}: connection lost (")
    assert "; 7 attempts in a row failed, retried after 0.01, 0.02, 0.04, 0.08, 0.16, 0.32 s" in msg
    assert re.search(r"giving up\. \d+ KB of 400 KB are kept: pull again to resume from", msg)
    assert len(cdn_ranges(hubstub)) == 7  # the first answer cut after 50 kB, then none
    assert store.list() == []
    assert 0 < store.blobs.partial_path(f"sha256:{f.sha256}").stat().st_size <= 50_000


def test_a_host_that_cannot_be_reached_is_retried_then_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "BACKOFF_S", 0.001)
    blobs = BlobStore(tmp_path / "blobs")
    notes: list[str] = []
    # Bound and never listening: connections are refused, and no other test can take
    # the port meanwhile (a free port, let go, was taken once under the full suite).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}/blob"
        with pytest.raises(PullError, match=r"cannot connect \(.*\); 7 attempts in a row failed"):
            download.fetch(
                blobs, "sha256:" + "0" * 64, 10, url, {}, lambda n: None, notice=notes.append
            )
    assert len(notes) == 6 and all("cannot connect" in n for n in notes)
