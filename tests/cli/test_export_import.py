"""``localllm export``, ``import FILE`` and ``verify`` end to end, through the real CLI.

Two models go to a second home whose daemon runs all along: it lists them once
the import ends and answers exactly as the first home's daemon did (generate,
embed, show, tags).  A pipe (``export -o - | import -``), a cut copy finished by a
second run, and a hostile archive refused with nothing listed; ``verify`` finds a
damaged blob of a pulled model and ``--repair`` fetches it from the Hub stand-in.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from localllm.store.pull import pull_model
from tests.support.daemon import REPO, Daemon, cli_env, free_port, run_cli, start_daemon
from tests.support.home import isolate
from tests.support.hubstub import HubStub
from tests.support.models import add_tiny


def post(d: Daemon, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(d.url + path, json=body, timeout=120, trust_env=False)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def answers(d: Daemon) -> dict[str, Any]:
    """What the daemon says about and with the two models (store paths left out)."""
    options = {"temperature": 0, "num_predict": 8}
    generated = post(
        d,
        "/api/generate",
        {"model": "tiny", "prompt": "abc", "raw": True, "stream": False, "options": options},
    )
    return {
        "response": generated["response"],
        "embeddings": post(d, "/api/embed", {"model": "tiny-embed", "input": ["hello"]})[
            "embeddings"
        ],
        "show": {m: shown(d, m) for m in ("tiny", "tiny-embed")},
        "tags": httpx.get(d.url + "/api/tags", timeout=30, trust_env=False).json(),
    }


def shown(d: Daemon, model: str) -> dict[str, Any]:
    out = post(d, "/api/show", {"model": model})
    blobs = str(Store().blobs.root)  # the Modelfile's FROM names the blob in this home
    assert blobs in out["modelfile"]
    out["modelfile"] = out["modelfile"].replace(blobs, "<blobs>")
    return out


def two_models(tmp_path: Path) -> Path:
    """``tiny`` and ``tiny-embed`` in the test's home, exported by the CLI to a file."""
    add_tiny(tmp_path, "tiny")
    add_tiny(tmp_path, "tiny-embed", pooling="mean")
    archive = tmp_path / "models.tar"
    out = run_cli("export", "tiny", "tiny-embed", "-o", str(archive), env=cli_env(free_port()))
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^exported 2 models \(tiny:latest, tiny-embed:latest\): \d blobs", out.stdout)
    return archive


@pytest.mark.slow  # two daemons, two model loads each
def test_two_models_move_to_a_second_home_and_answer_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    archive = two_models(tmp_path)
    (tmp_path / "a").mkdir()
    with start_daemon(tmp_path / "a") as a:
        first = answers(a)
    assert first["response"] == "defghijk" and first["embeddings"]

    isolate(monkeypatch, tmp_path / "home-b")
    (tmp_path / "b").mkdir()
    with start_daemon(tmp_path / "b") as b:
        assert httpx.get(b.url + "/api/tags", trust_env=False).json()["models"] == []
        out = b.cli("import", str(archive))
        assert out.returncode == 0, out.stdout + out.stderr
        assert re.search(r"^imported +tiny:latest ", out.stdout, re.M), out.stdout
        assert "2 imported in" in out.stdout
        assert re.search(r"^blobs: \d copied \(.*, sha256 checked\), 0 already", out.stdout, re.M)
        second = answers(b)  # the daemon reads the store on each request: no restart
    assert second == first


def test_export_to_a_pipe_and_import_from_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_tiny(tmp_path, "tiny")
    home_b = tmp_path / "home-b"
    python = sys.executable
    script = (
        f"set -o pipefail; {python} -m localllm export tiny -o - | "
        f"LOCALLLM_HOME={home_b} {python} -m localllm import -"
    )
    out = subprocess.run(
        ["bash", "-c", script],
        env=cli_env(free_port()),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "exported 1 model (tiny:latest): 2 blobs" in out.stderr  # stdout is the archive
    assert "Importing from the archive standard input" in out.stdout
    isolate(monkeypatch, home_b)
    assert [e.name.display for e in Store().list()] == ["tiny:latest"]


def test_a_cut_copy_then_the_whole_one_and_a_hostile_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = two_models(tmp_path)
    data = archive.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) * 2 // 3])
    hostile = tmp_path / "hostile.tar"
    hostile.write_bytes(_with_a_link(data))

    isolate(monkeypatch, tmp_path / "home-b")
    env = cli_env(free_port())
    refused = run_cli("import", str(hostile), env=env)
    assert refused.returncode == 1
    assert "Error: refusing the archive: 'blobs/sha256-" in refused.stderr
    assert "is a link (to '/etc/passwd')" in refused.stderr
    assert Store().list() == []

    stopped = run_cli("import", str(cut), env=env)
    assert stopped.returncode == 1
    assert "Error: the archive is cut short" in stopped.stderr
    assert Store().list() == []
    done = run_cli("import", str(archive), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 imported in" in done.stdout
    assert sorted(e.name.display for e in Store().list()) == ["tiny-embed:latest", "tiny:latest"]

    taken = run_cli("import", "--dry-run", str(archive), env=env)
    assert taken.returncode == 0 and "0 to import, 2 unchanged" in taken.stdout
    wrong = run_cli("import", str(archive), str(tmp_path), env=env)
    assert wrong.returncode == 2 and "is for `import ollama`" in wrong.stderr


def _with_a_link(data: bytes) -> bytes:
    """``data`` with its last blob turned into a symbolic link to /etc/passwd."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data)) as src,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        members = src.getmembers()
        for m in members[:-1]:
            dst.addfile(m, src.extractfile(m))
        link = tarfile.TarInfo(members[-1].name)
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        dst.addfile(link)
    return out.getvalue()


def test_verify_and_repair_a_pulled_model(hub: HubStub, tmp_path: Path) -> None:
    name = "hf.co/someone/Tiny-GGUF:Q4_K_M"
    pull_model(Store(), parse_name(name), lambda e: None)
    layer = Store().get(parse_name(name)).manifest.first(Media.MODEL)
    assert layer is not None
    blob = Store().blobs.path(layer.digest)
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    blob.write_bytes(bytes(raw))
    env = cli_env(free_port())

    found = run_cli("verify", env=env)
    assert found.returncode == 1
    assert f"damaged  {name}" in found.stdout
    assert f"blob {layer.digest}: its bytes do not match its digest" in found.stdout
    assert "1 damaged" in found.stdout and "verify --repair" in found.stdout

    fixed = run_cli("verify", "--repair", name, env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"{name}: repaired" in fixed.stdout
    again = run_cli("verify", env=env)
    assert again.returncode == 0 and "all whole" in again.stdout
    assert os.path.getsize(blob) == layer.size
