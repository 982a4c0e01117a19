"""Hub fixtures (a plugin, see tests/conftest.py), HF_ENDPOINT pointed at the stand-in of
hubstub.py: ``hubstub`` serves nothing yet and retries fast; ``hub`` holds one repo,
``someone/Tiny-GGUF``, with two quants."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.store import download
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub, StubFile


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    """The local Hub stand-in with one repo, ``someone/Tiny-GGUF``, holding two quants."""
    stub = HubStub(tmp_path / "hub").start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)  # in this process; a daemon waits 1, 2, 4 s
    for quant in ("Q4_K_M", "Q8_0"):
        gguf = write_gguf(tmp_path / f"tiny-{quant}.gguf", Shape(name=f"tiny {quant}"), quant)
        stub.add_file("someone/Tiny-GGUF", f"tiny-{quant}.gguf", gguf)
    stub.add_file("someone/Tiny-GGUF", "README.md", b"# tiny\n")
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def hubstub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    stub = HubStub(tmp_path / "hub").start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    # Retries stay fast in tests; the logic under test is the same.
    monkeypatch.setattr(download, "BACKOFF_S", 0.01)
    try:
        yield stub
    finally:
        assert download.wait_idle(10.0), "a download thread outlived its test"
        stub.stop()


def padded_gguf(hub: HubStub, tmp: Path, repo: str, size: int, pad: int = 0) -> StubFile:
    """Serve ``repo``'s ``Tiny-Q4_K_M.gguf``: a valid GGUF of ``size`` bytes, the tail
    ``pad`` bytes (readers ignore what follows the tensor data; ``pad`` tells files apart)."""
    path = write_gguf(tmp / f"src-{repo.replace('/', '_')}.gguf", Shape())
    with open(path, "ab") as fh:
        fh.write(bytes([pad]) * (size - path.stat().st_size))
    return hub.add_file(repo, "Tiny-Q4_K_M.gguf", path)
