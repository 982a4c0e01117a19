"""Names from Ollama's registry end to end: the real CLI and daemon, the registry stand-in,
the real libllama.

A community name the catalogue does not have is pulled from the stand-in with its Go
template and parameters, which ``show`` lists and a chat then uses; ``ollama://`` reaches
the registry through the HTTP API; a model of an architecture llama.cpp lacks is refused
in one line before its weights are downloaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import Daemon, start_daemon
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.registrystub import RegistryStub
from tests.support.tinymodel import expected_greedy, make_tiny_model

GO_TEMPLATE = "{{ range .Messages }}{{ .Role }}:{{ .Content }}{{ end }}"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryStub]:
    stub = RegistryStub(tmp_path / "registry").start()
    monkeypatch.setenv("LOCALLLM_OLLAMA_REGISTRY", stub.url)
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def daemon(registry: RegistryStub, tmp_path: Path) -> Iterator[Daemon]:
    gguf = make_tiny_model(tmp_path / "tiny", chat_template=None)
    registry.add_model("someuser/echo-chat", gguf, template=GO_TEMPLATE, params={"num_predict": 3})
    odd = write_gguf(tmp_path / "odd.gguf", Shape(arch="ollamaonly", n_layers=8, n_embd=256))
    registry.add_model("someuser/odd", odd)
    with start_daemon(tmp_path) as d:
        yield d


def test_a_community_model_is_pulled_and_chats_with_its_template(
    daemon: Daemon, registry: RegistryStub
) -> None:
    d = daemon
    dry = d.cli("pull", "someuser/echo-chat", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("someuser/echo-chat:latest (dry run: nothing downloaded, ")
    assert re.search(r"^\s+source\s+ollama://someuser/echo-chat:latest$", dry.stdout, re.M)
    out = d.cli("pull", "someuser/echo-chat")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines[:2] == [
        "pulling manifest",
        "someuser/echo-chat:latest is ollama://someuser/echo-chat:latest "
        "(not in the catalogue: from Ollama's registry)",
    ]
    assert lines[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    sha = registry.model_digest("someuser/echo-chat").removeprefix("sha256:")
    assert [ln for ln in lines if re.fullmatch(rf"pulling {sha[:12]}: 100% ▕█+▏ .+", ln)]

    shown = d.cli("show", "someuser/echo-chat").stdout
    assert re.search(r"^  Source\n\s+from\s+ollama://someuser/echo-chat:latest\n", shown, re.M)
    assert re.search(r"^  Parameters\n\s+num_predict\s+3\n", shown, re.M), shown
    assert d.cli("show", "someuser/echo-chat", "--template").stdout.strip() == GO_TEMPLATE
    # The registry's template renders the chat ("user:hello"), its num_predict cuts it.
    ran = d.cli("run", "someuser/echo-chat", "hello")
    assert (ran.returncode, ran.stdout) == (0, expected_greedy("user:hello")[:3] + "\n"), ran.stderr


def test_ollama_scheme_and_an_unknown_architecture_through_the_api(
    daemon: Daemon, registry: RegistryStub
) -> None:
    d = daemon
    r = httpx.post(
        f"{d.url}/api/pull",
        json={"model": "ollama://someuser/echo-chat", "stream": False},
        trust_env=False,
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["status"] == "success", r.text
    listed = d.cli("list").stdout
    assert re.search(r"^someuser/echo-chat:latest\s", listed, re.M), listed

    odd = d.cli("pull", "someuser/odd")
    assert odd.returncode == 1 and "Traceback" not in odd.stderr
    assert odd.stderr.splitlines()[-1] == (
        "Error: ollama://someuser/odd:latest is a 'ollamaonly' model, an architecture the "
        "pinned llama.cpp cannot load (it is built for Ollama's own engine)"
    )
    weights = registry.model_digest("someuser/odd")
    assert registry.served.get(weights, 0) < (Path(registry.blobs[weights]).stat().st_size // 4)
