"""``localllm import ollama`` end to end: the real CLI imports a store laid out as Ollama
writes it (tests/support/ollamastore.py); the real daemon lists the models under their Ollama names
and each answers through a real runner, with Ollama's template, parameters, message
history, projector and adapter.  The Ollama store's bytes and mtimes never change."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.template.select import render_prompt
from tests.support.daemon import Daemon, run_cli, start_daemon
from tests.support.ollamastore import (
    MESSAGES_A,
    NAMES,
    REPLY_A,
    SYSTEM_A,
    TEMPLATE_A,
    OllamaStore,
    snapshot,
    three_models,
)
from tests.support.tinymodel import CHAT_TEMPLATE, tokenize
from tests.support.visionmodel import RED, RED_GREEDY, png

pytestmark = pytest.mark.slow  # three model loads: started first (tests/conftest.py)
N = 6


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "1")
    with start_daemon(tmp_path) as d:
        yield d


def chat(d: Daemon, model: str, content: str, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": content}
    if "images" in extra:
        message["images"] = extra.pop("images")
    r = httpx.post(
        d.url + "/api/chat",
        timeout=120,
        trust_env=False,
        json={"model": model, "messages": [message], "stream": False, **extra},
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_three_models_come_over_by_hard_links_and_each_answers(
    daemon: Daemon, tmp_path: Path
) -> None:
    d = daemon
    ollama = three_models(tmp_path / "ollama", tmp_path / "work")
    before = snapshot(ollama.root)
    started = time.monotonic()
    out = d.cli("import", "ollama", str(ollama.root))
    wall = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    took = re.search(r"^3 imported in (\d+\.\d+) s$", out.stdout, re.M)
    assert took is not None, out.stdout
    blobs = len(ollama.digests())
    assert re.search(
        rf"^blobs: {blobs} hard-linked \([^)]*, 0 bytes copied\), 0 copied \(0 B\)$",
        out.stdout,
        re.M,
    ), out.stdout
    assert float(took.group(1)) < 1.0
    print(
        f"\nimport of 3 models ({blobs} blobs): {took.group(1)} s in the command, "
        f"{wall:.2f} s for the whole CLI run"
    )
    for name in NAMES:
        assert re.search(rf"^imported +{re.escape(name)} ", out.stdout, re.M), out.stdout

    listed = d.cli("list")
    assert {row.split()[0] for row in listed.stdout.splitlines()[1:]} == set(NAMES)

    # llama3.2: its Go template, system prompt and history make the prompt, and its
    # parameters (stop "s", temperature 0) end the reply.
    prompt = render_prompt(
        TEMPLATE_A,
        CHAT_TEMPLATE,
        [{"role": "system", "content": SYSTEM_A}, *MESSAGES_A, {"role": "user", "content": "x"}],
    )
    a = chat(d, "llama3.2", "x", options={"seed": 1})
    assert a["message"]["content"] == REPLY_A
    assert a["prompt_eval_count"] == len(tokenize(prompt))
    # The vision model sees the image through its projector.
    red = base64.b64encode(png(32, 32, RED)).decode()
    b = chat(d, "someuser/tiny-vision:v1", "", images=[red], options={"num_predict": N})
    assert b["message"]["content"] == RED_GREEDY[:N]
    # The adapter moves "a"'s successor from "b" to "c".
    c = chat(d, "hf.co/someone/Tiny-GGUF:Q8_0", "a", options={"num_predict": N})
    assert c["message"]["content"] == "cdefgh"

    again = d.cli("import", "ollama", str(ollama.root))
    assert again.returncode == 0, again.stderr
    assert "nothing to import: all 3 models are already in localllm" in again.stdout
    assert snapshot(ollama.root) == before


def test_broken_entries_dry_run_and_one_model(daemon: Daemon, tmp_path: Path) -> None:
    d = daemon
    ollama = three_models(tmp_path / "ollama", tmp_path / "work")
    absent = {
        "mediaType": "application/vnd.ollama.image.model",
        "size": 5,
        "digest": "sha256:" + "0" * 64,
    }
    ollama.manifest("registry.ollama.ai/library/missing/latest", ollama.config(), [absent])
    ollama.manifest(
        "registry.ollama.ai/library/cloud/latest",
        ollama.config(remote_host="https://ollama.com:443"),
        [],
    )
    before = snapshot(ollama.root)

    dry = d.cli("import", "ollama", str(ollama.root), "--dry-run")
    assert dry.returncode == 1  # the broken entry is reported as a failure already
    assert "would import" in dry.stdout and "3 to import" in dry.stdout
    assert "hard-linked" in dry.stdout and "digests are checked during the import" in dry.stdout
    assert d.cli("list").stdout.splitlines()[1:] == []

    one = d.cli("import", "ollama", str(ollama.root), "-m", "someuser/tiny-vision:v1")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "1 imported in" in one.stdout

    rest = d.cli("import", "ollama", str(ollama.root))
    assert rest.returncode == 1
    assert re.search(
        r"^failed +missing:latest: blob sha256:0{64} is missing$", rest.stdout, re.M
    ), rest.stdout
    assert re.search(r"^skipped +cloud:latest: a cloud model", rest.stdout, re.M)
    assert "2 imported, 1 unchanged, 1 skipped, 1 failed in" in rest.stdout
    names = {row.split()[0] for row in d.cli("list").stdout.splitlines()[1:]}
    assert names == set(NAMES)
    assert snapshot(ollama.root) == before


def test_default_folder_and_localllms_own_store(daemon: Daemon, tmp_path: Path) -> None:
    d = daemon
    ollama = OllamaStore(tmp_path / "somewhere")
    ollama.manifest("registry.ollama.ai/library/llama3.2/latest", ollama.config(), [])
    ours = tmp_path / "localllm-home" / "models"
    # OLLAMA_MODELS names Ollama's store; LOCALLLM_MODELS keeps ours apart from it.
    env = {**d.env, "OLLAMA_MODELS": str(ollama.root), "LOCALLLM_MODELS": str(ours)}
    out = run_cli("import", "ollama", env=env)
    assert f"from the Ollama store at {ollama.root}" in out.stdout, out.stdout + out.stderr
    assert "failed" in out.stdout and "no GGUF model layer" in out.stdout
    # Without LOCALLLM_MODELS, OLLAMA_MODELS is our store too: nothing to import.
    env.pop("LOCALLLM_MODELS")
    same = run_cli("import", "ollama", env=env)
    assert same.returncode == 1
    assert "localllm's own model store" in same.stderr
    missing = run_cli("import", "ollama", str(tmp_path / "nothing"), env=d.env)
    assert missing.returncode == 1 and "is not a folder" in missing.stderr
