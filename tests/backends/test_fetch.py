"""backends.source.fetch_sdist against a package index on disk: nothing unchecked runs.

The index is a folder in the simple-API layout (PEP 503) that pip reads through a
file:// URL, with pip's own configuration switched off so only it is seen.  Its
sdists have an in-tree build backend that writes a marker file when imported:
pip imports it to read an sdist's metadata, so the marker shows whether the
package's code ran.  A tampered sdist must be refused before that; the pinned one
gets that far (so the marker is a real witness, not one that can never appear).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from localllm import paths
from localllm.backends import source
from tests.support.backend_build import plant_pip

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"

BACKEND = """
import pathlib
pathlib.Path({marker!r}).write_text("the sdist's build code ran")

def get_requires_for_build_wheel(config_settings=None):
    return []

def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = pathlib.Path(metadata_directory) / "llama_cpp_python-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\\nName: llama-cpp-python\\nVersion: {version}\\n")
    return info.name

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("a download never builds")
"""


def fake_sdist(path: Path, marker: Path, note: bytes) -> Path:
    top = f"llama_cpp_python-{VERSION}"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: llama-cpp-python\nVersion: {VERSION}\n".encode(),
        "pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        b'backend-path = ["."]\n',
        "backend.py": BACKEND.format(marker=str(marker), version=VERSION).encode(),
        "vendor/llama.cpp/ggml/CMakeLists.txt": b"set(GGML_VERSION_MAJOR 0)\n" + note,
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def serve(index: Path, sdist: Path) -> None:
    """``index`` becomes a simple-API index holding ``sdist`` as llama-cpp-python's file."""
    files = index / "files"
    files.mkdir(parents=True, exist_ok=True)
    (files / SDIST).write_bytes(sdist.read_bytes())
    project = index / "simple" / "llama-cpp-python"
    project.mkdir(parents=True, exist_ok=True)
    (project / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{SDIST}">{SDIST}</a></body></html>'
    )


@pytest.fixture
def index(pip_index: Path) -> Path:
    return pip_index


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_tampered_sdist_is_refused_before_its_build_code_runs(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "build-code-ran"
    pinned = fake_sdist(tmp_path / "pinned.tar.gz", marker, b"# the real one\n")
    monkeypatch.setitem(source.PINNED_SHA256, VERSION, sha256(pinned))
    serve(index, fake_sdist(tmp_path / "tampered.tar.gz", marker, b"# tampered\n"))
    log: list[str] = []
    with pytest.raises(source.SourceError) as err:
        source.fetch_sdist(VERSION, log)
    assert not marker.exists(), "pip ran the tampered sdist's build backend"
    assert "does not have the pinned sha256" in str(err.value)
    assert "pip refused it before running any of it" in str(err.value)
    assert "--require-hashes" in log[0]
    assert not (paths.cache() / "sdist" / SDIST).exists()
    assert [p.name for p in (paths.cache() / "sdist").iterdir()] == []

    # The index now serves the pinned file: pip checks it, then reads its metadata,
    # which runs its (checked) build code: the marker above could have appeared.
    serve(index, pinned)
    got = source.fetch_sdist(VERSION)
    assert got == paths.cache() / "sdist" / SDIST and sha256(got) == sha256(pinned)
    assert marker.exists()


def test_pip_py_in_the_working_folder_is_not_what_runs(
    index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m pip`` puts the working folder first on sys.path (unless PYTHONSAFEPATH)."""
    marker = tmp_path / "fake-pip-ran"
    here = tmp_path / "downloads"
    plant_pip(here, marker)
    monkeypatch.chdir(here)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    pinned = fake_sdist(tmp_path / "pinned.tar.gz", tmp_path / "ran", b"")
    monkeypatch.setitem(source.PINNED_SHA256, VERSION, sha256(pinned))
    serve(index, pinned)
    try:
        got = source.fetch_sdist(VERSION)
    finally:
        assert not marker.exists(), "the pip.py in the working folder ran"
    assert sha256(got) == sha256(pinned)
