"""Pulls racing deletes and copies of the same model: a clear 4xx or a completed pull,
never an internal error, and no blob left that no manifest uses."""

from __future__ import annotations

import random
import threading
import time
import traceback
from pathlib import Path

from localllm.errors import LocalLLMError
from localllm.models.service import ModelService
from localllm.store import download
from localllm.store.local import Store
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub

REPO = "acme/Race-GGUF"
NAME = f"hf.co/{REPO}"
PULLS = 20
TOKENS = ("<unk>", "<s>", "<|im_end|>", *(f"t{i}" for i in range(3, 64)))


def test_pulls_deletes_and_copies_race_without_500_or_orphans(
    hubstub: HubStub, store: Store, tmp_path: Path
) -> None:
    path = write_gguf(tmp_path / "src.gguf", Shape(n_layers=2, tokens=TOKENS, eos_id=2))
    hubstub.add_file(REPO, "Race-Q4_K_M.gguf", path)
    hubstub.add_file(REPO, "template", b"{{ .Prompt }}")  # a text layer each pull writes
    service = ModelService(store)
    bad: list[BaseException] = []
    answers: dict[int, int] = {}  # HTTP status -> how many pulls ended with it
    counting = threading.Lock()
    stop = threading.Event()
    rng = random.Random(36)

    def pull() -> None:
        status = 500  # anything but our errors is what the daemon answers 500 for
        try:
            service.pull(NAME, lambda _e: None)
            status = 200
        except LocalLLMError as exc:
            status = exc.status
            if status >= 500:
                bad.append(exc)
        except BaseException as exc:
            bad.append(exc)
        with counting:
            answers[status] = answers.get(status, 0) + 1

    def churn() -> None:
        # Deletes and copies of the pulled model while pulls run: a missing model is a
        # 404, expected here; anything else is a failure.
        while not stop.is_set():
            try:
                if rng.random() < 0.7:
                    service.delete(NAME)
                else:
                    service.copy(NAME, "copy-of-race")
                    service.delete("copy-of-race")
            except LocalLLMError as exc:
                if exc.status >= 500:
                    bad.append(exc)
            except BaseException as exc:
                bad.append(exc)
            time.sleep(rng.random() * 0.002)

    churners = [threading.Thread(target=churn) for _ in range(2)]
    for t in churners:
        t.start()
    deadline = time.monotonic() + 60
    try:
        for _ in range(PULLS // 4):
            pulls = [threading.Thread(target=pull) for _ in range(4)]
            for t in pulls:
                t.start()
            for t in pulls:
                t.join(max(deadline - time.monotonic(), 0.1))
    finally:
        stop.set()
        for t in churners:
            t.join(10)
    assert download.wait_idle(10)
    first = "".join(traceback.format_exception(bad[0])[-4:]) if bad else ""
    assert not bad, f"{len(bad)} pulls or deletes failed (answers {answers}); first:\n{first}"
    # A delete never takes what a pull in flight has found or written: every pull completes.
    assert answers == {200: PULLS}
    # Whatever won, every stored blob belongs to a model that is listed.
    orphans = set(store.blobs.digests()) - store.manifests.referenced()
    assert not orphans, f"blobs no manifest uses: {sorted(orphans)} (answers {answers})"
    assert not [p for p in store.blobs.root.iterdir() if p.name.startswith(".tmp-")]
